"""Start a fleetguard daemon as a real process and talk to it over loopback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))


def scrape(port: int) -> dict[str, float]:
    """Every sample of a /metrics page, keyed `name` or `name{label=value,...}` (labels sorted)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


class Daemon:
    def __init__(self, args: list[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [FLEETGUARD, *args, "--metrics-port", "0", "--store", str(tmp / "fleet.duckdb")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(tmp / "kmsg.seq"),
                "FLEETGUARD_RUNTIME_ENABLED": "false",
                "FLEETGUARD_RUNTIME_PORT": "0",  # when a test enables it: a busy runtime port is fatal
                **(env or {}),
            },
        )
        self.port = self._read_port()

    def _read_port(self) -> int:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"/metrics at http://\S+:(\d+)/metrics", line)
            if match:
                return int(match.group(1))
        self.proc.kill()
        raise AssertionError("daemon did not report its port:\n" + "".join(lines))

    def metrics(self) -> dict[str, float]:
        """The unlabelled samples (the agent's own health), by name."""
        return {k: v for k, v in scrape(self.port).items() if "{" not in k}

    def wait_for_rounds(self, rounds: int, timeout_seconds: float = 60) -> None:
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.metrics().get("fleetguard_agent_rounds_total", 0) >= rounds:
                return
            time.sleep(0.2)  # polling a real process, bounded by the deadline
        raise AssertionError(f"fewer than {rounds} rounds within {timeout_seconds} s")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out
