"""fleetguard's alerts in a real Alertmanager (Debian's prometheus-alertmanager) on loopback: received,
deduplicated when re-sent, resolved by endsAt. Skipped where the binary is not installed."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from diagnosis.rules import Signals
from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import FakeClock
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import xid

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
pytestmark = pytest.mark.skipif(
    BINARY is None, reason="prometheus-alertmanager is not installed (make system-deps)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "am.yml"
    config.write_text("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n")
    port = _free_port()
    assert BINARY is not None
    proc = subprocess.Popen(
        [
            BINARY,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
            assert time.monotonic() < deadline, "alertmanager did not become ready"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def active_alerts(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{base}/api/v2/alerts?active=true", timeout=5) as r:
        alerts: list[dict[str, Any]] = json.loads(r.read())
    return [a for a in alerts if a["labels"].get("alertname") == "FleetguardIncident"]


def wait_for(condition: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_alertmanager_receives_deduplicates_and_resolves(alertmanager: str, store: Store) -> None:
    clock = FakeClock(time.time())  # Alertmanager judges startsAt/endsAt against its own clock
    hook = WebhookConfig("am", f"{alertmanager}/api/v2/alerts", WebhookKind.ALERTMANAGER, rate_per_second=100)
    config = AlertsConfig(webhooks=(hook,), retry_schedule_seconds=(0.0, 1.0, 2.0), resend_seconds=1)
    policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
    service = IncidentService.open(store.cursor(), policy, clock.time(), webhooks=config.webhooks)
    relay = AlertRelay(store.cursor(), config, clock)

    def send_all() -> None:
        for _ in range(5):  # the endpoint's rate lets one message through per 10 ms of the fake clock
            relay.run_once()
            clock.advance(0.01)

    changes = service.round(
        Signals(events=[xid(79, clock.time(), host=h) for h in ("n1", "n2")]), clock.time()
    )
    send_all()
    alerts = wait_for(lambda: len(active_alerts(alertmanager)) == 2 and active_alerts(alertmanager))
    assert {a["labels"]["host"] for a in alerts} == {"n1", "n2"}
    assert {a["labels"]["fault"] for a in alerts} == {"xid:79"}

    # Re-sent while open (as Alertmanager needs): still two alerts, not four.
    clock.advance(1)  # (endsAt is judged by Alertmanager's real clock: the fake one stays close to it)
    send_all()
    time.sleep(0.5)
    assert len(active_alerts(alertmanager)) == 2

    service.resolve(changes[0].incident.incident_id, clock.time())
    send_all()
    remaining = wait_for(lambda: len(active_alerts(alertmanager)) == 1 and active_alerts(alertmanager))
    assert [a["labels"]["host"] for a in remaining] == [changes[1].incident.key.host]
