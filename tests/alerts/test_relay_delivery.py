"""The outbox relay against a real loopback receiver: an outage, retries, Retry-After, 410, dead letters,
signatures and idempotent delivery. The relay's schedule runs on a fake clock; HTTP is real."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

from diagnosis.rules import Signals
from fleetguard.alerts.outbox import MAX_BATCH, counts, heads, requeue_dead
from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import FakeClock
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.alerts.receiver import receiver
from tests.diagnosis.records import T0, counter, xid

SECRET = "whsec_" + base64.b64encode(b"fleetguard-test-secret-32-bytes!").decode()
SCHEDULE = (0.0, 5.0, 30.0, 60.0, 120.0)


def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


def setup(
    store: Store, hook: WebhookConfig, clock: FakeClock, **config: object
) -> tuple[IncidentService, AlertRelay]:
    alerts = AlertsConfig(webhooks=(hook,), retry_schedule_seconds=SCHEDULE, jitter_fraction=0.1, **config)  # type: ignore[arg-type]
    policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})  # every host may be acted on
    service = IncidentService.open(store.cursor(), policy, clock.time(), webhooks=alerts.webhooks)
    return service, AlertRelay(store.cursor(), alerts, clock)


def make_incidents(service: IncidentService, clock: FakeClock, hosts: int, prefix: str = "n") -> None:
    """Open then resolve (by an operator) one incident per host: 2 alerts each."""
    events = [xid(79, clock.time(), host=f"{prefix}{i}") for i in range(hosts)]
    changes = service.round(Signals(events=events), clock.time())
    for change in changes:
        service.resolve(change.incident.incident_id, clock.time() + 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def drive(relay: AlertRelay, clock: FakeClock, seconds: float, step: float = 1.0) -> None:
    for _ in range(int(seconds / step)):
        relay.run_once()
        clock.advance(step)


def test_a_receiver_down_for_a_minute_gets_every_alert_once_with_valid_signatures(
    tmp_path: Path, store: Store
) -> None:
    clock = FakeClock(T0)
    port = free_port()
    hook = WebhookConfig(
        "ops",
        f"http://127.0.0.1:{port}/hook",
        WebhookKind.GENERIC,
        secret_file(tmp_path),
        rate_per_second=100,
    )
    service, relay = setup(store, hook, clock)
    make_incidents(service, clock, hosts=5)
    drive(relay, clock, 60)  # nothing listens: connection refused, retried on the schedule
    assert counts(store.connection) == {("ops", "pending"): 10}
    with receiver(SECRET, port=port) as (_url, got):
        drive(relay, clock, 200)
        assert counts(store.connection) == {("ops", "delivered"): 10}
        assert len(got.accepted) == 10 and got.bad_signatures == 0 and got.duplicates == 0
    events = [body["type"] for body in got.accepted.values()]
    assert events.count("incident.opened") == 5 and events.count("incident.resolved") == 5
    # Per incident, "opened" arrived before "resolved".
    order = [(r["body"]["data"]["incident_id"], r["body"]["type"]) for r in got.requests]
    for incident in {i for i, _ in order}:
        assert [t for i, t in order if i == incident] == ["incident.opened", "incident.resolved"]
    attempts = store.connection.execute(
        "SELECT count(*), count(DISTINCT alert_id) FROM alert_deliveries"
    ).fetchall()
    assert attempts[0][0] > 10 and attempts[0][1] == 10  # failed attempts are recorded too


def test_a_lost_answer_makes_a_retry_with_the_same_webhook_id_and_the_receiver_accepts_it_once(
    tmp_path: Path, store: Store
) -> None:
    clock = FakeClock(T0)

    def slow_first(n: int) -> tuple[int, float, dict[str, str]]:
        return 200, (1.5 if n == 0 else 0.0), {}  # processed, but answered after the client gave up

    with receiver(SECRET, slow_first) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path), timeout_seconds=0.3)
        service, relay = setup(store, hook, clock)
        service.round(Signals(events=[xid(79, T0)]), T0)
        drive(relay, clock, 20)
    ids = [r["headers"]["webhook-id"] for r in got.requests]
    assert len(ids) == 2 and ids[0] == ids[1]
    assert len(got.accepted) == 1 and got.duplicates == 1


def test_429_with_retry_after_is_honoured(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)

    def throttled(n: int) -> tuple[int, float, dict[str, str]]:
        return (429, 0.0, {"Retry-After": "40"}) if n == 0 else (200, 0.0, {})

    with receiver(SECRET, throttled) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path))
        service, relay = setup(store, hook, clock)
        service.round(Signals(events=[xid(79, T0)]), T0)
        drive(relay, clock, 39)
        assert len(got.requests) == 1  # the schedule says 5 s; Retry-After says 40
        drive(relay, clock, 5)
        assert len(got.accepted) == 1


def test_retries_run_out_into_a_dead_letter_that_replay_sends_again(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)
    state = {"up": False}

    def flaky(_n: int) -> tuple[int, float, dict[str, str]]:
        return (200, 0.0, {}) if state["up"] else (503, 0.0, {})

    with receiver(SECRET, flaky) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path))
        # Every outage counts as long here: only the alert's own schedule, no short probing.
        service, relay = setup(store, hook, clock, long_outage_seconds=0.0)
        service.round(Signals(events=[xid(79, T0)]), T0)
        drive(relay, clock, 600, step=5)
        assert counts(store.connection) == {("ops", "dead"): 1}
        assert len(got.requests) == len(SCHEDULE)
        state["up"] = True
        assert requeue_dead(store.connection, clock.time()) == 1
        drive(relay, clock, 5)
        assert counts(store.connection) == {("ops", "delivered"): 1} and len(got.accepted) == 1


def test_410_disables_the_endpoint(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)
    with receiver(SECRET, lambda _n: (410, 0.0, {})) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path), rate_per_second=100)
        service, relay = setup(store, hook, clock)
        make_incidents(service, clock, hosts=2)
        drive(relay, clock, 100)
    assert len(got.requests) == 1
    assert counts(store.connection) == {("ops", "gone"): 4}


def test_the_endpoint_rate_limit_spaces_messages(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)
    with receiver(None) as (url, got):
        hook = WebhookConfig("chat", url, WebhookKind.SLACK, rate_per_second=1.0)
        service, relay = setup(store, hook, clock)
        make_incidents(service, clock, hosts=3)
        relay.run_once()
        assert len(got.requests) == 1  # one message a second
        drive(relay, clock, 10, step=0.5)
        assert len(got.requests) == 6


def test_an_endpoint_back_after_an_outage_gets_its_whole_backlog_within_seconds_in_order(
    tmp_path: Path, store: Store
) -> None:
    clock = FakeClock(T0)
    state = {"up": False}

    def down_then_up(_n: int) -> tuple[int, float, dict[str, str]]:
        return (200, 0.0, {}) if state["up"] else (503, 0.0, {})

    with receiver(SECRET, down_then_up) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path), rate_per_second=10)
        service, relay = setup(store, hook, clock)
        for batch in range(5):  # alerts keep coming during a minute's outage
            make_incidents(service, clock, hosts=2, prefix=f"b{batch}n")
            drive(relay, clock, 12, step=0.5)
        during = len(got.requests)
        state["up"] = True
        drive(relay, clock, 18, step=0.5)  # the probe is at most 15 s away; the backlog goes at 10/s
        assert counts(store.connection) == {("ops", "delivered"): 20}
    # Probed with one alert at a time on 1, 2, 4, 8, 15 s steps, not every alert on its own schedule.
    assert during <= 10
    assert len(got.accepted) == 20 and got.duplicates == 0 and got.bad_signatures == 0
    order = [(r["body"]["data"]["incident_id"], r["body"]["type"]) for r in got.requests[during:]]
    for incident in {i for i, _ in order}:
        assert [t for i, t in order if i == incident] == ["incident.opened", "incident.resolved"]
    assert relay.health("ops").up


def test_the_alerts_own_schedule_applies_only_after_a_long_outage(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)
    with receiver(SECRET, lambda _n: (503, 0.0, {})) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path))
        service, relay = setup(store, hook, clock, long_outage_seconds=60.0)
        service.round(Signals(events=[xid(79, T0)]), T0)
        drive(relay, clock, 60)
        probes = len(got.requests)
        drive(relay, clock, 60)
        tail = len(got.requests) - probes
    assert probes >= 6  # 0, 1, 3, 7, 15, 30, 45 s: short probing
    assert tail <= 1  # past the long-outage mark: the schedule's next step (at 95 s) only
    assert counts(store.connection) == {("ops", "pending"): 1}


def test_one_alert_refused_with_a_4xx_does_not_hold_back_the_others(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)
    with receiver(SECRET, lambda n: (400, 0.0, {}) if n == 0 else (200, 0.0, {})) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path), rate_per_second=100)
        service, relay = setup(store, hook, clock)
        service.round(Signals(events=[xid(79, T0, host=h) for h in ("n1", "n2", "n3")]), T0)
        drive(relay, clock, 2, step=0.1)
    assert relay.health("ops").up  # a 400 is an answer: the endpoint is there
    assert len(got.accepted) == 2
    assert counts(store.connection) == {("ops", "delivered"): 2, ("ops", "pending"): 1}


def test_a_dead_letter_takes_its_incidents_later_alerts_along_and_replay_sends_them_in_order(
    tmp_path: Path, store: Store
) -> None:
    clock = FakeClock(T0)
    state = {"up": False}

    def flaky(_n: int) -> tuple[int, float, dict[str, str]]:
        return (200, 0.0, {}) if state["up"] else (503, 0.0, {})

    with receiver(SECRET, flaky) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path), rate_per_second=100)
        service, relay = setup(store, hook, clock, long_outage_seconds=0.0)
        make_incidents(service, clock, hosts=1)
        drive(relay, clock, 600, step=5)
        assert counts(store.connection) == {("ops", "dead"): 2}  # the "resolved" never went alone
        state["up"] = True
        requeue_dead(store.connection, clock.time())
        drive(relay, clock, 3)
    assert [r["body"]["type"] for r in got.requests if r["body"]["type"]][-2:] == [
        "incident.opened",
        "incident.resolved",
    ]
    assert len(got.accepted) == 2


def test_an_escalation_updates_the_same_pagerduty_incident(tmp_path: Path, store: Store) -> None:
    clock = FakeClock(T0)
    routing = tmp_path / "routing"
    routing.write_text("R0UT1NGKEY\n")
    routing.chmod(0o600)  # a secret readable by others is refused (fleetguard.secret_files)
    with receiver(None) as (url, got):
        hook = WebhookConfig("pd", url, WebhookKind.PAGERDUTY, str(routing), rate_per_second=100)
        service, relay = setup(store, hook, clock)
        for rate in (20, 200):  # symbol errors: warning, then critical on the same port
            service.round(
                Signals(nic_counters=[counter(clock.time(), "symbol_error", 60 * rate, rate)]), clock.time()
            )
            drive(relay, clock, 1, step=0.1)
        [incident] = service.engine.active()
        service.resolve(incident.incident_id, clock.time())
        drive(relay, clock, 1, step=0.1)
    bodies = [r["body"] for r in got.requests]
    assert [(b["event_action"], b.get("payload", {}).get("severity")) for b in bodies] == [
        ("trigger", "warning"),
        ("trigger", "critical"),
        ("resolve", None),
    ]
    assert len({b["dedup_key"] for b in bodies}) == 1 and all(
        b["routing_key"] == "R0UT1NGKEY" for b in bodies
    )


def test_after_a_restart_a_backlog_far_along_its_schedule_is_probed_at_once(
    tmp_path: Path, store: Store
) -> None:
    clock = FakeClock(T0)
    with receiver(SECRET) as (url, got):
        hook = WebhookConfig("ops", url, WebhookKind.GENERIC, secret_file(tmp_path), rate_per_second=100)
        service, _ = setup(store, hook, clock)
        make_incidents(service, clock, hosts=2)
        # As a relay that died during an outage left it: the next attempts half an hour away.
        store.connection.execute("UPDATE alert_outbox SET next_attempt_at = now() + INTERVAL 30 MINUTE")
        _, relay = setup(store, hook, clock)  # the restarted process's relay
        drive(relay, clock, 2, step=0.1)
    assert counts(store.connection) == {("ops", "delivered"): 4} and len(got.accepted) == 4


def test_one_endpoints_backlog_never_hides_another_endpoints_alerts(store: Store) -> None:
    insert = (
        "INSERT INTO alert_outbox (alert_id, endpoint, incident_id, event, severity, created_at, body_json, "
        "status, attempts, next_attempt_at, delivered_at, last_error, seq, schedule_step) VALUES "
        "(?, ?, ?, 'opened', 'critical', to_timestamp(?), '{}', 'pending', 0, to_timestamp(?), NULL, '', "
        "?, 0)"
    )
    for n in range(MAX_BATCH + 50):  # a long outage's backlog, older than anything else
        store.connection.execute(insert, [f"a{n}", "down", f"i{n}", T0 + n, T0 + n, n])
    store.connection.execute(insert, ["late", "up", "j", T0 + 1000, T0 + 1000, 10_000])
    found = heads(store.connection)
    assert [a.alert_id for a in found if a.endpoint == "up"] == ["late"]
    assert sum(1 for a in found if a.endpoint == "down") == MAX_BATCH
