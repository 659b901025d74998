"""`fleetguard up --simulate 2x8` sending signed alerts to a receiver process that is down (503) for a
while: what the receiver got, and when, against what the outbox holds. Used by the end-to-end test (a short
outage, a fast probe) and by bench/alert_outage.py (the full 60 s outage at default settings)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

SECRET = "whsec_" + base64.b64encode(b"fleetguard-outage-secret-32bytes").decode()
RECEIVER = Path(__file__).with_name("receiver_process.py")
FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))


@dataclass
class OutageRun:
    returned_at: float  # when the endpoint answered 200 again
    log: list[dict[str, Any]]  # every request the receiver got
    outbox: list[
        tuple[str, str, str, float, float | None, str]
    ]  # id, incident, event, created, delivered, status
    up_output: str
    up_returncode: int | None

    def raised_during_outage(self) -> list[tuple[str, str, str, float, float | None, str]]:
        return [row for row in self.outbox if row[3] < self.returned_at]

    def catch_up_seconds(self) -> float:
        """From the endpoint's return to the last alert raised during the outage being delivered."""
        late = [row[4] for row in self.raised_during_outage()]
        if not late or any(t is None for t in late):
            return float("inf")
        return max(0.0, max(t for t in late if t is not None) - self.returned_at)


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.05)  # polling a real process's file: it offers no event to wait on


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pending(read_api: str) -> int | None:
    """Alerts waiting in the outbox of the `up` serving `read_api` (None: it did not answer)."""
    try:
        with urllib.request.urlopen(f"http://{read_api}/v1/alerts", timeout=10) as response:
            doc = json.loads(response.read())
    except (OSError, ValueError):
        return None
    return sum(int(row["count"]) for row in doc["outbox"] if row["status"] == "pending")


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_outage(
    folder: Path,
    *,
    outage_seconds: float,
    after_seconds: float,
    alerts_toml: str = "",
    first_alert_timeout: float = 150.0,
    head_start_seconds: float = 0.0,
    stop_when_caught_up: bool = False,
) -> OutageRun:
    """Start the receiver (down), then `up`; the outage ends `outage_seconds` after the first refused
    alert (while it lasts the relay probes with its oldest alert only, so the receiver sees few requests);
    `up` stops `after_seconds` later, or (`stop_when_caught_up`) as soon as its outbox holds no pending alert.
    `head_start_seconds`: the simulated fleet's (its scripted faults come that much sooner). Every process is
    stopped and reaped before returning."""
    secret, down, log, port_file = (folder / n for n in ("secret", "down", "log.jsonl", "port"))
    secret.write_text(SECRET)
    secret.chmod(0o600)  # a secret readable by others is refused (fleetguard.secret_files)
    down.write_text("503 until this file goes")
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), str(secret), str(down), str(log), str(port_file)]
    )
    up: subprocess.Popen[str] | None = None
    returned_at = float("inf")
    try:
        _wait_for(port_file, 30)
        port = int(port_file.read_text())
        config = folder / "fleetguard.toml"
        config.write_text(
            f'[alerts]\n{alerts_toml}\n[[alerts.webhooks]]\nname = "ops"\n'
            f'url = "http://127.0.0.1:{port}/hook"\nkind = "generic"\nsecret_file = "{secret}"\n'
            'min_severity = "info"\nrate_per_second = 20\n'
        )
        store = folder / "fleetguard.duckdb"
        read_api = f"127.0.0.1:{_free_port()}"
        up = subprocess.Popen(
            [
                FLEETGUARD,
                "up",
                "--simulate",
                "2x8",
                "--no-predict",
                "--no-runtime",
                "--metrics-port",
                "0",
                "--config",
                str(config),
                "--store",
                str(store),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "FLEETGUARD_AGENT_FLUSH_INTERVAL_SECONDS": "1",
                "FLEETGUARD_CONTROLLER_LISTEN": read_api,  # up's read API, asked for the outbox
                "FLEETGUARD_SIMULATE_HEAD_START_SECONDS": str(head_start_seconds),
                "FLEETGUARD_DASHBOARD_ENABLED": "false",
                "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(folder / "kmsg.seq"),
            },
        )
        deadline = time.monotonic() + first_alert_timeout
        first_refused: float | None = None
        while True:  # polling real processes, bounded by the deadline
            refused = [r for r in _read_log(log) if r["status"] == 503]
            if refused and first_refused is None:
                first_refused = time.monotonic()
            if first_refused is not None and time.monotonic() - first_refused >= outage_seconds:
                break
            if time.monotonic() > deadline or up.poll() is not None:
                raise TimeoutError("no outage could be staged: no alert was refused")
            time.sleep(0.2)  # polling a real fleetguard up process: it offers no event to wait on
        down.unlink()
        returned_at = time.time()
        stop_at = time.monotonic() + after_seconds
        # The store is up's until it stops: its read API says when nothing waits in the outbox any more
        # (every alert raised during the outage delivered, or given up on), and the outbox is read after.
        while time.monotonic() < stop_at and (not stop_when_caught_up or _pending(read_api) != 0):
            time.sleep(0.2)  # polling a real fleetguard up process: it offers no event to wait on
    finally:
        output, code = "", None
        if up is not None:
            up.send_signal(signal.SIGTERM)
            output, _ = up.communicate(timeout=120)
            code = up.returncode
        receiver.send_signal(signal.SIGTERM)
        receiver.wait(timeout=30)
    con = duckdb.connect(str(folder / "fleetguard.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT alert_id, incident_id, event, epoch(created_at), epoch(delivered_at), status "
            "FROM alert_outbox ORDER BY created_at, seq"
        ).fetchall()
    finally:
        con.close()
    outbox = [
        (str(a), str(i), str(e), float(c), None if d is None else float(d), str(s))
        for a, i, e, c, d, s in rows
    ]
    return OutageRun(returned_at, _read_log(log), outbox, output, code)
