"""Attack #9 through the relay: a webhook secret_file that is a link to a root-only file, or a file other
users can read, is refused with one line naming the setting and the fix; nothing is sent; the alert waits and
goes out once the file is fixed. HTTP is real (a loopback receiver)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from diagnosis.rules import Signals
from fleetguard.alerts.outbox import counts
from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import FakeClock
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, parse_alerts
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.alerts.receiver import receiver
from tests.diagnosis.records import T0, xid

ROUTING_KEY = "R0UTINGKEY0123456789abcdef012345"  # a PagerDuty integration key's shape


def pagerduty_relay(
    store: Store, url: str, secret: Path, clock: FakeClock
) -> tuple[IncidentService, AlertRelay, WebhookConfig]:
    alerts = parse_alerts(
        {"webhooks": [{"name": "pd", "url": url, "kind": "pagerduty", "secret_file": str(secret)}]}
    )
    alerts = AlertsConfig(webhooks=alerts.webhooks, retry_schedule_seconds=(0.0,) + (5.0,) * 7)
    policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
    service = IncidentService.open(store.cursor(), policy, clock.time(), webhooks=alerts.webhooks)
    return service, AlertRelay(store.cursor(), alerts, clock), alerts.webhooks[0]


def drive(relay: AlertRelay, clock: FakeClock, seconds: int) -> None:
    for _ in range(seconds):
        relay.run_once()
        clock.advance(1.0)


def last_errors(store: Store) -> list[str]:
    return [str(r[0]) for r in store.connection.execute("SELECT last_error FROM alert_outbox").fetchall()]


def test_a_secret_file_linked_to_a_private_file_is_never_sent_and_says_why(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    private = tmp_path / "root-only"  # stands for /etc/shadow or another service's key
    private.write_text("the-content-of-a-private-file\n")
    private.chmod(0o600)
    link = tmp_path / "pd-secret"
    link.symlink_to(private)
    clock = FakeClock(T0)
    with receiver(None) as (url, got), caplog.at_level(logging.ERROR):
        service, relay, hook = pagerduty_relay(store, url, link, clock)
        assert hook.secret_key == "alerts.webhooks[0].secret_file"
        # Said once at start-up, naming the setting.
        assert any(
            "alerts.webhooks[0].secret_file" in r.getMessage() and "symbolic link" in r.getMessage()
            for r in caplog.records
        )
        service.round(Signals(events=[xid(79, T0)]), T0)
        drive(relay, clock, 12)
        assert got.requests == []  # nothing left the host, let alone the linked file's content
        assert counts(store.connection) == {("pd", "pending"): 1}  # not lost: waiting for a usable file
        assert all(
            e == f"alerts.webhooks[0].secret_file: {link} is a symbolic link; refused "
            "(point alerts.webhooks[0].secret_file at the file itself)"
            for e in last_errors(store)
        )
        # The operator replaces the link with the real key, private to this user: the alert goes out.
        link.unlink()
        link.write_text(ROUTING_KEY + "\n")
        link.chmod(0o600)
        drive(relay, clock, 10)
        assert [r["body"]["routing_key"] for r in got.requests] == [ROUTING_KEY]
    assert counts(store.connection) == {("pd", "delivered"): 1}


def test_a_secret_file_other_users_can_read_is_refused_with_the_chmod_that_fixes_it(
    tmp_path: Path, store: Store
) -> None:
    secret = tmp_path / "pd-secret"
    secret.write_text(ROUTING_KEY + "\n")
    secret.chmod(0o644)
    clock = FakeClock(T0)
    with receiver(None) as (url, got):
        service, relay, _hook = pagerduty_relay(store, url, secret, clock)
        service.round(Signals(events=[xid(79, T0)]), T0)
        drive(relay, clock, 10)
        assert got.requests == []
        assert set(last_errors(store)) == {
            f"alerts.webhooks[0].secret_file: {secret} is readable by others (mode 0644); chmod 600 {secret}"
        }
        secret.chmod(0o600)
        drive(relay, clock, 10)
        assert [r["body"]["routing_key"] for r in got.requests] == [ROUTING_KEY]
