"""One round of the incident service inside `up`: operator requests left beside the store are carried out."""

from __future__ import annotations

from pathlib import Path

from diagnosis.rules import Signals
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.rounds import incident_round
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from fleetguard.store.operator_requests import Request, leave, request_path
from tests.diagnosis.records import T0, xid


def test_a_breaker_reset_request_closes_the_breaker_and_is_consumed(tmp_path: Path) -> None:
    path = str(tmp_path / "s.duckdb")
    with Store.open(path) as store:
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2}})
        service = IncidentService.open(store.cursor(), policy, T0)
        service.round(Signals(events=[xid(79, T0, host=f"n{i}") for i in range(4)]), T0)
        assert service.engine.breaker.tripped
        feed = StoreFeed.open(store.cursor())
        leave(path, Request.BREAKER_RESET, {"process_backlog": False})
        incident_round(service, feed, None, path, T0 + 60)
        assert not service.engine.breaker.tripped
        assert not request_path(path, Request.BREAKER_RESET).exists()
        state = store.connection.execute("SELECT tripped FROM breaker_state").fetchall()
        assert state == [(False,)]


def test_an_alerts_replay_request_requeues_dead_letters(tmp_path: Path) -> None:
    path = str(tmp_path / "s.duckdb")
    hook = WebhookConfig("ops", "http://127.0.0.1:9/x", WebhookKind.SLACK)
    with Store.open(path) as store:
        service = IncidentService.open(store.cursor(), load_policy(), T0, webhooks=[hook])
        service.round(Signals(events=[xid(79, T0)]), T0)
        store.connection.execute("UPDATE alert_outbox SET status = 'dead'")
        leave(path, Request.ALERTS_REPLAY, {})
        incident_round(service, StoreFeed.open(store.cursor()), None, path, T0 + 1)
        assert store.connection.execute("SELECT status FROM alert_outbox").fetchall() == [("pending",)]


def test_a_reset_that_processes_the_backlog_returns_the_repairs_it_asks_for(tmp_path: Path) -> None:
    """The controller and `up` carry out the repairs a round returns: those the breaker held come back."""
    path = str(tmp_path / "s.duckdb")
    with Store.open(path) as store:
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2}})
        service = IncidentService.open(store.cursor(), policy, T0)
        service.round(Signals(events=[xid(79, T0, host=f"n{i}") for i in range(4)]), T0)
        leave(path, Request.BREAKER_RESET, {"process_backlog": True})
        changes = incident_round(service, StoreFeed.open(store.cursor()), None, path, T0 + 60)
    requested = [a for c in changes for a in c.actions if a.outcome.value == "requested"]
    assert requested and {a.action.value for a in requested} == {"reboot_node"}
