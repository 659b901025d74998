"""Faults seen but not (yet) incidents, and incidents clearing: the engine's state between rounds that the
incident tables do not hold. As plain dicts too, so a restart takes them back (a threshold counted across
a restart opens the incident it would have opened without one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnosis.model import IncidentKey, Observation, RepairAction, Severity


@dataclass(slots=True)
class Pending:
    """A fault seen but not (yet) an incident: its bursts within the rule's window."""

    bursts: list[tuple[float, float]] = field(default_factory=list)  # (first, last) per burst
    count: int = 0
    first_seen: float = 0.0
    seen: list[Observation] = field(default_factory=list)


def pending_to_dict(pending: Pending) -> dict[str, Any]:
    return {
        "bursts": [list(b) for b in pending.bursts],
        "count": pending.count,
        "first_seen": pending.first_seen,
        "seen": [observation_to_dict(o) for o in pending.seen],
    }


def pending_from_dict(data: dict[str, Any]) -> Pending:
    return Pending(
        bursts=[(float(a), float(b)) for a, b in data["bursts"]],
        count=int(data["count"]),
        first_seen=float(data["first_seen"]),
        seen=[observation_from_dict(o) for o in data["seen"]],
    )


def observation_to_dict(obs: Observation) -> dict[str, Any]:
    return {
        "ts": obs.ts,
        "key": obs.key.text(),
        "severity": obs.severity.value,
        "action": obs.action.value,
        "rule": obs.rule,
        "message": obs.message,
        "count": obs.count,
        "healthy": obs.healthy,
        "min_count": obs.min_count,
        "window_seconds": obs.window_seconds,
        "needs_company": obs.needs_company,
        "sticky_seconds": obs.sticky_seconds,
        "storm_count": obs.storm_count,
    }


def observation_from_dict(data: dict[str, Any]) -> Observation:
    return Observation(
        ts=float(data["ts"]),
        key=IncidentKey.parse(str(data["key"])),
        severity=Severity(data["severity"]),
        action=RepairAction(data["action"]),
        rule=str(data["rule"]),
        message=str(data["message"]),
        count=int(data["count"]),
        healthy=bool(data["healthy"]),
        min_count=int(data["min_count"]),
        window_seconds=float(data["window_seconds"]),
        needs_company=bool(data["needs_company"]),
        sticky_seconds=float(data["sticky_seconds"]),
        storm_count=int(data["storm_count"]),
    )
