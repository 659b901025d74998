"""The shipped systemd units: `systemd-analyze verify` accepts them and `security --offline=true` rates each
at most 5.0 (the agent was 8.9 "EXPOSED" as root with every capability). systemd is not PID 1 here, so the
units are analysed, not run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
UNITS = ("fleetguard-agent.service", "fleetguard-controller.service")
SHIPPED_BINARY = "/opt/fleetguard/.venv/bin/fleetguard"
MAX_EXPOSURE = 5.0
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")

pytestmark = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")


def installed_copy(unit: str, tmp_path: Path) -> Path:
    """The unit as installed on this machine: ExecStart= names the fleetguard of this checkout (verify
    refuses a unit whose binary does not exist), nothing else changed."""
    text = (DATA / unit).read_text()
    assert SHIPPED_BINARY in text
    copy = tmp_path / unit
    copy.write_text(text.replace(SHIPPED_BINARY, str(Path(sys.executable).with_name("fleetguard"))))
    return copy


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run([SYSTEMD_ANALYZE, *args], capture_output=True, text=True, timeout=120, check=False)


def exposure(unit: Path) -> float:
    """The overall exposure `systemd-analyze security --offline=true` gives (0 safe .. 10 exposed)."""
    done = analyze("security", "--offline=true", "--no-pager", str(unit))
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?) ", done.stdout)
    assert match, f"no overall exposure in:\n{done.stdout}\n{done.stderr}"
    return float(match.group(1))


@pytest.mark.parametrize("unit", UNITS)
def test_the_unit_verifies_cleanly(unit: str, tmp_path: Path) -> None:
    done = analyze("verify", "--no-pager", str(installed_copy(unit, tmp_path)))
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize("unit", UNITS)
def test_the_unit_is_confined(unit: str, tmp_path: Path) -> None:
    score = exposure(installed_copy(unit, tmp_path))
    assert score <= MAX_EXPOSURE, f"{unit}: exposure {score} > {MAX_EXPOSURE}"


def test_the_exposure_parser_sees_an_unconfined_unit(tmp_path: Path) -> None:
    bare = tmp_path / "bare.service"
    bare.write_text(f"[Service]\nExecStart={Path(sys.executable).with_name('fleetguard')} agent\n")
    assert exposure(bare) > 9.0  # root, every capability: what the threshold is there to catch


def settings(unit: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (DATA / unit).read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_the_agent_is_watched_and_keeps_only_the_capabilities_it_uses() -> None:
    agent = settings("fleetguard-agent.service")
    assert agent["Type"] == ["notify"] and float(agent["WatchdogSec"][0]) >= 10
    assert set(agent["CapabilityBoundingSet"][0].split()) == {
        "CAP_SYSLOG",
        "CAP_KILL",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_SYS_PTRACE",
        "CAP_DAC_READ_SEARCH",
    }
    assert agent["UMask"] == ["0077"] and agent["NoNewPrivileges"] == ["true"]
    assert agent["SystemCallFilter"][0] == "@system-service"
    # @privileged is filtered out, but running a command as the job's owner needs setuid/setgid/setgroups.
    assert "@setuid" in agent["SystemCallFilter"][-1].split()
    families = set(agent["RestrictAddressFamilies"][0].split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}


def test_the_controller_runs_as_its_own_user_with_no_capabilities() -> None:
    controller = settings("fleetguard-controller.service")
    assert controller["User"] == ["fleetguard"] and controller["CapabilityBoundingSet"] == [""]
    assert controller["Type"] == ["notify"] and controller["StateDirectory"] == ["fleetguard-controller"]
    assert controller["UMask"] == ["0077"]
