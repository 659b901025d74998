"""Prometheus families of the incident service: open incidents, alert deliveries, the breaker."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from diagnosis.incident import Incident


@dataclass(frozen=True)
class IncidentSnapshot:
    open_by: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (severity, fault kind) -> count
    sent: Mapping[str, int] = field(default_factory=dict)
    failed: Mapping[str, int] = field(default_factory=dict)
    dead: Mapping[str, int] = field(default_factory=dict)
    silenced: Mapping[str, int] = field(default_factory=dict)
    endpoint_up: Mapping[str, bool] = field(default_factory=dict)  # the relay's view of each endpoint
    outbox: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (endpoint, status) -> rows
    breaker_open: bool = False


def open_counts(incidents: list[Incident]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for incident in incidents:
        key = (incident.severity.value, incident.key.fault.partition(":")[0])
        out[key] = out.get(key, 0) + 1
    return out


class IncidentMetrics(PromCollector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = IncidentSnapshot()

    def update(self, snapshot: IncidentSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            s = self._snapshot
        incidents = GaugeMetricFamily(
            "fleetguard_incidents_open",
            "Open incidents by severity and kind of fault",
            labels=["severity", "kind"],
        )
        for (severity, kind), n in sorted(s.open_by.items()):
            incidents.add_metric([severity, kind], n)
        yield incidents
        for name, doc, values in (
            ("fleetguard_alerts_sent", "Alerts delivered (2xx)", s.sent),
            ("fleetguard_alerts_failed", "Alert attempts that failed and will be retried", s.failed),
            ("fleetguard_alerts_dead_lettered", "Alerts given up after the retry schedule", s.dead),
            ("fleetguard_alerts_silenced", "Alerts a silence muted at the relay", s.silenced),
        ):
            family = CounterMetricFamily(name, doc, labels=["endpoint"])
            for endpoint, n in sorted(values.items()):
                family.add_metric([endpoint], n)
            yield family
        up = GaugeMetricFamily(
            "fleetguard_alert_endpoint_up",
            "1 while the webhook endpoint answers; 0 while the relay probes it after a failure",
            labels=["endpoint"],
        )
        for endpoint, is_up in sorted(s.endpoint_up.items()):
            up.add_metric([endpoint], 1.0 if is_up else 0.0)
        yield up
        outbox = GaugeMetricFamily(
            "fleetguard_alerts_outbox", "Outbox rows by endpoint and status", labels=["endpoint", "status"]
        )
        for (endpoint, status), n in sorted(s.outbox.items()):
            outbox.add_metric([endpoint, status], n)
        yield outbox
        yield GaugeMetricFamily(
            "fleetguard_breaker_open",
            "1 while the repair circuit breaker is open",
            value=1.0 if s.breaker_open else 0.0,
        )
