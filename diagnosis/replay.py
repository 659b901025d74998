"""Replay: a policy over recorded history on a simulated clock, and what it would have done: incidents,
actions and alerts, and how two policies differ. Pure; `fleetguard policy replay` reads the store."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from diagnosis.alert_payloads import AlertEvent, alert_event
from diagnosis.engine import IncidentEngine
from diagnosis.incident import ActionEntry, Incident
from diagnosis.policy import Policy
from diagnosis.rules import Signals


@dataclass
class ReplayReport:
    rounds: int = 0
    openings: list[Incident] = field(default_factory=list)  # every open and reopen, as it was then
    incidents: dict[str, Incident] = field(default_factory=dict)  # final state by id
    actions: list[ActionEntry] = field(default_factory=list)  # ledger lines as first written
    alerts: list[tuple[AlertEvent, str, str]] = field(default_factory=list)  # (event, incident id, severity)
    breaker_trips: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "incidents": len(self.incidents),
            "openings": len(self.openings),
            "incidents_by_fault": dict(sorted(Counter(i.key.fault for i in self.incidents.values()).items())),
            "incidents_by_severity": dict(
                sorted(Counter(i.severity.value for i in self.incidents.values()).items())
            ),
            "actions": dict(
                sorted(Counter(f"{a.action.value}:{a.outcome.value}" for a in self.actions).items())
            ),
            "alerts": dict(sorted(Counter(f"{e.short}:{s}" for e, _, s in self.alerts).items())),
            "breaker_trips": self.breaker_trips,
        }


def replay(policy: Policy, rounds: Iterable[tuple[float, Signals]], end: float | None = None) -> ReplayReport:
    """Feed each round (its end time, its records) to a fresh engine; then let time run on to `end`."""
    engine = IncidentEngine(policy)
    report = ReplayReport()
    last = 0.0
    for now, signals in rounds:
        _record(report, engine.observe(signals, now), engine)
        report.rounds += 1
        last = now
    if end is not None and end > last:
        _record(report, engine.tick(end), engine)
    return report


def _record(report: ReplayReport, changes: Iterable[Any], engine: IncidentEngine) -> None:
    for change in changes:
        incident = change.incident
        report.incidents[incident.incident_id] = incident
        if change.opened:
            report.openings.append(incident)
            if incident.key.fault == "breaker:tripped":
                report.breaker_trips += 1
        report.actions.extend(a for a in change.actions if not a.fault_returned)
        event = alert_event(change)
        if event is not None:
            report.alerts.append((event, incident.incident_id, incident.severity.value))


@dataclass(frozen=True)
class ReplayDiff:
    only_in_a: list[str]  # incident keys (host|component|fault) one policy raised and the other did not
    only_in_b: list[str]
    openings_a: int
    openings_b: int
    actions_a: dict[str, int]
    actions_b: dict[str, int]
    alerts_a: dict[str, int]
    alerts_b: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {
            "incidents_only_with_a": self.only_in_a,
            "incidents_only_with_b": self.only_in_b,
            "openings": {"a": self.openings_a, "b": self.openings_b},
            "actions": {"a": self.actions_a, "b": self.actions_b},
            "alerts": {"a": self.alerts_a, "b": self.alerts_b},
        }


def compare(a: ReplayReport, b: ReplayReport) -> ReplayDiff:
    keys_a = {i.key.text() for i in a.incidents.values()}
    keys_b = {i.key.text() for i in b.incidents.values()}
    sa, sb = a.summary(), b.summary()
    return ReplayDiff(
        only_in_a=sorted(keys_a - keys_b),
        only_in_b=sorted(keys_b - keys_a),
        openings_a=len(a.openings),
        openings_b=len(b.openings),
        actions_a=sa["actions"],
        actions_b=sb["actions"],
        alerts_a=sa["alerts"],
        alerts_b=sb["alerts"],
    )
