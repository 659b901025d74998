"""fleetguard's alerts in a real Alertmanager (Debian's prometheus-alertmanager) on loopback: received,
deduplicated when re-sent, resolved by endsAt, updated in place by an escalation, and muted by a silence
set with `fleetguard alerts silence`. Skipped where the binary is not installed."""

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
from click.testing import CliRunner

from diagnosis.rules import Signals
from fleetguard.alerts.relay import AlertRelay
from fleetguard.alerts.silence_rules import parse_matchers
from fleetguard.alerts.silences import add_silence
from fleetguard.cli import cli
from fleetguard.clock import FakeClock
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import counter, xid

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
            time.sleep(0.1)  # polling a real Alertmanager starting: it offers no event to wait on
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
        time.sleep(0.1)  # polling a real Alertmanager process: it offers no event to wait on


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


def all_alerts(base: str) -> list[dict[str, Any]]:
    """Ours, whatever their state (active or suppressed by a silence)."""
    url = f"{base}/api/v2/alerts?active=true&silenced=true&inhibited=true"
    with urllib.request.urlopen(url, timeout=5) as r:
        alerts: list[dict[str, Any]] = json.loads(r.read())
    return [a for a in alerts if a["labels"].get("alertname") == "FleetguardIncident"]


def relay_for(alertmanager: str, store: Store, clock: FakeClock) -> tuple[IncidentService, AlertRelay]:
    hook = WebhookConfig("am", f"{alertmanager}/api/v2/alerts", WebhookKind.ALERTMANAGER, rate_per_second=100)
    config = AlertsConfig(webhooks=(hook,), retry_schedule_seconds=(0.0, 1.0, 2.0), resend_seconds=1)
    policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
    service = IncidentService.open(store.cursor(), policy, clock.time(), webhooks=config.webhooks)
    return service, AlertRelay(store.cursor(), config, clock)


def send(relay: AlertRelay, clock: FakeClock) -> None:
    for _ in range(5):
        relay.run_once()
        clock.advance(0.01)


def test_an_escalation_updates_the_same_alertmanager_alert(alertmanager: str, store: Store) -> None:
    clock = FakeClock(time.time())
    service, relay = relay_for(alertmanager, store, clock)
    service.round(Signals(nic_counters=[counter(clock.time(), "symbol_error", 600, rate=20)]), clock.time())
    send(relay, clock)
    [warning] = wait_for(lambda: active_alerts(alertmanager))
    assert warning["annotations"]["severity"] == "warning" and "severity" not in warning["labels"]
    clock.advance(1)
    changes = service.round(
        Signals(nic_counters=[counter(clock.time(), "symbol_error", 6000, rate=200)]), clock.time()
    )
    assert changes[0].incident.severity.value == "critical"
    send(relay, clock)
    critical = wait_for(
        lambda: [a for a in active_alerts(alertmanager) if a["annotations"]["severity"] == "critical"]
    )
    assert len(active_alerts(alertmanager)) == 1  # the same alert, updated: not a second one
    assert critical[0]["fingerprint"] == warning["fingerprint"]


def test_a_silence_set_from_the_cli_mutes_the_alert_in_alertmanager_until_it_ends(
    alertmanager: str, store: Store, tmp_path: Path
) -> None:
    clock = FakeClock(time.time())
    service, relay = relay_for(alertmanager, store, clock)
    service.round(Signals(events=[xid(79, clock.time(), host=h) for h in ("n1", "n2")]), clock.time())
    send(relay, clock)
    wait_for(lambda: len(active_alerts(alertmanager)) == 2)
    args = ["alerts", "silence", "--store", str(store.path), "--match", "host=n1", "--for", "1h"]
    result = CliRunner().invoke(cli, [*args, "--reason", "replacing the GPU"])
    assert result.exit_code == 0, result.output
    silence_id = result.output.split(":")[0]
    send(relay, clock)

    def states() -> dict[str, str]:
        return {a["labels"]["host"]: a["status"]["state"] for a in all_alerts(alertmanager)}

    # Alertmanager mutes it itself: still firing there (no false "resolved"), shown as suppressed.
    assert wait_for(lambda: states() == {"n1": "suppressed", "n2": "active"}), states()
    [muted] = [a for a in all_alerts(alertmanager) if a["labels"]["host"] == "n1"]
    assert len(muted["status"]["silencedBy"]) == 1
    send(relay, clock)  # a later sync does not add a second silence there
    with urllib.request.urlopen(f"{alertmanager}/api/v2/silences", timeout=5) as r:
        live = [s for s in json.loads(r.read()) if s["status"]["state"] == "active"]
    assert len(live) == 1 and live[0]["createdBy"]  # who set it, as the CLI saw them
    assert live[0]["comment"].startswith(f"fleetguard {silence_id}: replacing the GPU")

    ended = CliRunner().invoke(cli, ["alerts", "unsilence", "--store", str(store.path), silence_id])
    assert ended.exit_code == 0, ended.output
    clock.advance(1)
    send(relay, clock)
    assert wait_for(lambda: states() == {"n1": "active", "n2": "active"}), states()


def test_a_mirrored_silence_expires_in_alertmanager_when_it_ends(alertmanager: str, store: Store) -> None:
    clock = FakeClock(time.time())
    service, relay = relay_for(alertmanager, store, clock)
    service.round(Signals(events=[xid(79, clock.time(), host="n1")]), clock.time())
    # A short silence (the CLI's shortest is a minute): Alertmanager ends it by its own clock.
    add_silence(store.connection, parse_matchers(["host=n1"]), "alice", "reboot", clock.time(), 3.0)
    send(relay, clock)

    def state() -> str:
        found = all_alerts(alertmanager)
        return str(found[0]["status"]["state"]) if found else ""

    assert wait_for(lambda: state() == "suppressed"), state()
    assert wait_for(lambda: state() == "active"), state()  # expired there too, without fleetguard
