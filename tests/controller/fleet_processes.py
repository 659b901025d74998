"""Real `fleetguard controller` and `fleetguard agent` processes on loopback, for the fleet tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetguard.controller.tokens import add_token

FLEETGUARD = [sys.executable, "-m", "fleetguard"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Fleet:
    root: Path
    port: int
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def cleanup(self) -> None:
        """Kill whatever this fleet started and is still running (a test that failed half-way)."""
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        return self.root / "controller.duckdb"

    def write_controller_config(self, extra: str = "") -> Path:
        path = self.root / "controller.toml"
        path.write_text(
            f'[controller]\nlisten = "127.0.0.1:{self.port}"\ntokens_file = "{self.root}/tokens.json"\n'
            f'[store]\npath = "{self.store}"\n[dashboard]\nenabled = false\n{extra}'
        )
        return path

    def start_controller(self, extra: str = "") -> subprocess.Popen[bytes]:
        """`extra`: more TOML tables for the controller's config (e.g. a [predictor] table)."""
        log = (self.root / "controller.log").open("ab")
        proc = subprocess.Popen(
            [*FLEETGUARD, "controller", "--config", str(self.write_controller_config(extra))],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.started.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/v1/fleet", timeout=5):
                    return proc
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None:
                    raise RuntimeError((self.root / "controller.log").read_text()) from None
                time.sleep(0.1)  # polling a real controller process: it offers no event to wait on
        raise TimeoutError("controller did not start")

    def agent_config(
        self, host: str, seed: int, runtime: str = "enabled = false\n", head_start: float = 0.0
    ) -> Path:
        """`head_start`: simulate.head_start_seconds (the scripted faults come that much sooner)."""
        token = self.root / f"{host}.token"
        if not token.exists():
            token.write_text(add_token(self.root / "tokens.json", host))
            token.chmod(0o600)
        path = self.root / f"{host}.toml"
        path.write_text(
            f'[agent]\nhost = "{host}"\nmetrics_port = 0\nsample_interval_seconds = 0.5\n'
            f"flush_interval_seconds = 1.0\n"
            f'controller_url = "{self.url}"\ncontroller_token_file = "{token}"\n'
            f'spool_dir = "{self.root}/spool-{host}"\n'
            f'[runtime]\n{runtime}[store]\npath = "{self.root}/{host}-unused.duckdb"\n'
            f'[simulate]\nfleet = "1x8"\nseed = {seed}\nhead_start_seconds = {float(head_start)}\n'
        )
        return path

    def start_agent(
        self,
        host: str,
        seed: int,
        duration: float,
        runtime: str = "enabled = false\n",
        simulate: str | None = None,
        head_start: float = 0.0,
    ) -> subprocess.Popen[bytes]:
        """An agent shipping to this fleet's controller; `simulate` passes `--simulate` on the command line
        (the config's [simulate] fleet is 1x8 either way)."""
        proc = subprocess.Popen(
            [
                *FLEETGUARD,
                "agent",
                "--config",
                str(self.agent_config(host, seed, runtime, head_start)),
                "--duration",
                str(duration),
                *(["--simulate", simulate] if simulate else []),
            ],
            stdout=subprocess.PIPE,
            stderr=(self.root / f"{host}.log").open("ab"),
        )
        self.started.append(proc)
        return proc

    def hosts(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/v1/hosts", timeout=10) as response:
            return {h["host"]: h for h in json.loads(response.read())["hosts"]}

    def wait_for_hosts(self, names: set[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if names <= set(self.hosts()):
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)  # polling a real controller process: it offers no event to wait on
        raise TimeoutError(f"hosts {names} never shipped")


def summary(proc: subprocess.Popen[bytes], timeout: float = 60) -> dict[str, Any]:
    """The JSON line an agent prints when it stops."""
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    line = [x for x in out.decode().splitlines() if x.startswith("{")][-1]
    doc: dict[str, Any] = json.loads(line)
    return doc


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
