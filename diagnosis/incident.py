"""Incidents and their action ledger as typed records: what the engine returns and the store keeps."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from diagnosis.model import IncidentKey, Observation, RepairAction, Severity

# ActionOutcome is defined once, with the action ledger's record; imported from here too.
from fleetguard.records.findings import ActionOutcome as ActionOutcome


class IncidentState(StrEnum):
    OPEN = "open"  # seen, nothing done yet (or the action was held by the breaker)
    ACTING = "acting"  # an action was requested; the incident stays here until the fault is gone
    RESOLVED = "resolved"  # healthy for the policy's time, cancelled, or resolved by an operator
    CLOSED = "closed"  # resolved and did not come back for close_after_seconds


ACTIVE_STATES = frozenset({IncidentState.OPEN, IncidentState.ACTING})


class ChangeKind(StrEnum):
    OPENED = "opened"
    REOPENED = "reopened"  # a resolved incident's fault came back
    UPDATED = "updated"
    ESCALATED = "escalated"
    RESOLVED = "resolved"
    CLOSED = "closed"


class Resolution(StrEnum):
    NONE = ""
    HEALTHY = "healthy"
    CANCELLED = "cancelled"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Incident:
    incident_id: str
    key: IncidentKey
    state: IncidentState
    severity: Severity
    action: RepairAction  # recommended now (after escalation)
    rule: str
    summary: str
    first_seen: float
    last_seen: float
    occurrences: int
    opened_at: float
    resolved_at: float | None = None
    closed_at: float | None = None
    resolution: Resolution = Resolution.NONE
    returns: int = 0  # times the fault came back after being resolved
    escalation_step: int = 0
    sticky_seconds: float = 0.0
    flaps: int = 0  # times the fault cleared and came back within the flap window (one incident for all)


@dataclass(frozen=True, slots=True)
class ActionEntry:
    """One line of the action ledger: what was asked, by which rule, when it ended and how."""

    action_id: str
    incident_id: str
    host: str
    action: RepairAction
    rule: str
    requested_at: float
    outcome: ActionOutcome
    finished_at: float | None = None
    detail: str = ""
    fault_returned: bool = False
    # The circuit breaker counted this request: its window and rate limit weigh it (unless it ends
    # skipped). The count lives on the ledger line itself, so a stored action always carries its count.
    counted: bool = False


@dataclass(frozen=True, slots=True)
class IncidentChange:
    """What happened to one incident during one `observe` or `tick`: its state after, and why."""

    incident: Incident
    kinds: tuple[ChangeKind, ...]
    evidence: tuple[Observation, ...] = ()  # the observations that opened it (first few)
    actions: tuple[ActionEntry, ...] = ()  # ledger lines added or changed

    @property
    def opened(self) -> bool:
        return ChangeKind.OPENED in self.kinds or ChangeKind.REOPENED in self.kinds


def incident_id(key: IncidentKey, opened_at: float) -> str:
    """Deterministic, so a replay of the same history names the same incidents."""
    return hashlib.sha256(f"{key.text()}@{opened_at:.6f}".encode()).hexdigest()[:16]


def action_id(incident: str, requested_at: float, action: RepairAction) -> str:
    return hashlib.sha256(f"{incident}@{requested_at:.6f}:{action}".encode()).hexdigest()[:16]
