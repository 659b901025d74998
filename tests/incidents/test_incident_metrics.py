"""The incident families on /metrics: open incidents by severity and kind, alert counts, the breaker."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from diagnosis.engine import IncidentEngine
from diagnosis.rules import Signals
from fleetguard.incidents.metrics import IncidentMetrics, IncidentSnapshot, open_counts
from fleetguard.settings.policy_files import load_policy
from tests.diagnosis.records import T0, gpu, xid


def test_open_incidents_alerts_and_the_breaker_are_exported() -> None:
    engine = IncidentEngine(load_policy())
    engine.observe(Signals(events=[xid(79, T0)], gpu_samples=[gpu(T0, clocks_event_reasons=0x40)]), T0)
    metrics = IncidentMetrics()
    metrics.update(
        IncidentSnapshot(
            open_by=open_counts(engine.active()),
            sent={"ops": 3},
            failed={"ops": 2},
            dead={"ops": 1},
            silenced={"ops": 4},
            endpoint_up={"ops": False, "chat": True},
            outbox={("ops", "delivered"): 3, ("ops", "dead"): 1},
            breaker_open=True,
        )
    )
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert 'fleetguard_incidents_open{kind="xid",severity="critical"} 1.0' in text
    assert 'fleetguard_incidents_open{kind="throttle",severity="warning"} 1.0' in text
    assert 'fleetguard_alerts_sent_total{endpoint="ops"} 3.0' in text
    assert 'fleetguard_alerts_dead_lettered_total{endpoint="ops"} 1.0' in text
    assert 'fleetguard_alerts_outbox{endpoint="ops",status="dead"} 1.0' in text
    assert "fleetguard_breaker_open 1.0" in text
    assert 'fleetguard_alerts_silenced_total{endpoint="ops"} 4.0' in text
    assert 'fleetguard_alert_endpoint_up{endpoint="ops"} 0.0' in text
    assert 'fleetguard_alert_endpoint_up{endpoint="chat"} 1.0' in text
