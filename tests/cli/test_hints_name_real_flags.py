"""Every `--flag` a command's output advises exists on that command: run as a real process on this host
(where NVML, InfiniBand or the kernel log may be missing, so the advice is printed), then its `--help`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))
COMMANDS = {
    "collect": ["collect", "--once"],
    "scan": ["scan"],
    "agent": ["agent", "--metrics-port", "0", "--duration", "1"],
    "up": ["up", "--metrics-port", "0", "--dashboard-port", "0", "--no-predict", "--duration", "1"],
}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def _run(args: list[str], tmp: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGUARD_")}
    env |= {
        "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(tmp / "kmsg.seq"),
        "FLEETGUARD_RUNTIME_PORT": "0",
        "FLEETGUARD_CONTROLLER_LISTEN": "127.0.0.1:0",
        "FLEETGUARD_STORE_PATH": str(tmp / "s.duckdb"),
    }
    done = subprocess.run([FLEETGUARD, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_flags_a_command_advises_are_its_own(command: str, tmp_path: Path) -> None:
    said = _run(COMMANDS[command], tmp_path)
    accepted = set(FLAG.findall(_run([command, "--help"], tmp_path)))
    # `fleetguard up --simulate 2x8` names another command's flag together with that command: allowed.
    advised = {flag for line in said.splitlines() for flag in FLAG.findall(line) if "fleetguard " not in line}
    assert advised <= accepted, (advised - accepted, said)
