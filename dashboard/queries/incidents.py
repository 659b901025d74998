"""Incidents (the diagnosis engine's tables), their evidence and action ledger, the breaker, and what
operators did. Incidents are few (one per fault, not per line), so lists are bounded by count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import TS, Cursor, Row, as_int, fetch

MAX_INCIDENTS: Final = 1000
MAX_EVIDENCE: Final = 200
ACTIVE: Final = ("open", "acting")


@dataclass(frozen=True, slots=True)
class IncidentRow:
    incident_id: str
    host: str
    component_kind: str
    component_id: str
    fault: str
    state: str
    severity: str
    action: str
    rule: str
    summary: str
    first_seen: float
    last_seen: float
    occurrences: int
    resolved_at: float | None
    resolution: str
    returns: int
    escalation_step: int


_COLUMNS: Final = (
    "incident_id, host, component_kind, component_id, fault, state, severity, action, rule, summary, "
    "epoch(first_seen), epoch(last_seen), occurrences, epoch(resolved_at), resolution, returns, "
    "escalation_step"
)


def _incident(r: Row) -> IncidentRow:
    text = [str(v) for v in r[:10]]
    return IncidentRow(
        text[0],
        text[1],
        text[2],
        text[3],
        text[4],
        text[5],
        text[6],
        text[7],
        text[8],
        text[9],
        float(r[10]),
        float(r[11]),
        as_int(r[12]),
        None if r[13] is None else float(r[13]),
        str(r[14]),
        as_int(r[15]),
        as_int(r[16]),
    )


_LIST_SQL: Final = f"""
SELECT {_COLUMNS} FROM incidents
WHERE (state IN ('open', 'acting') OR last_seen >= {TS}) AND (? IS NULL OR host = ?)
  AND (? IS NULL OR component_id = ?)
ORDER BY CASE WHEN state IN ('open', 'acting') THEN 0 ELSE 1 END,
         CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, last_seen DESC
LIMIT {MAX_INCIDENTS}
"""


def incidents(
    cur: Cursor, since: float, *, host: str | None = None, component_id: str | None = None
) -> list[IncidentRow]:
    """Every active incident and those seen since `since`: active first, then by severity, newest first."""
    return [_incident(r) for r in fetch(cur, _LIST_SQL, [since, host, host, component_id, component_id])]


def incident(cur: Cursor, incident_id: str) -> IncidentRow | None:
    rows = fetch(cur, f"SELECT {_COLUMNS} FROM incidents WHERE incident_id = ?", [incident_id])
    return _incident(rows[0]) if rows else None


def active_by_severity(cur: Cursor) -> dict[str, int]:
    rows = fetch(cur, "SELECT severity, count(*) FROM incidents WHERE state IN ('open', 'acting') GROUP BY 1")
    return {str(r[0]): as_int(r[1]) for r in rows}


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    ts: float
    kind: str
    detail_json: str


def evidence(cur: Cursor, incident_id: str) -> list[EvidenceRow]:
    rows = fetch(
        cur,
        f"SELECT epoch(ts), kind, detail_json FROM incident_evidence WHERE incident_id = ? "
        f"ORDER BY ts LIMIT {MAX_EVIDENCE}",
        [incident_id],
    )
    return [EvidenceRow(float(r[0]), str(r[1]), str(r[2])) for r in rows]


@dataclass(frozen=True, slots=True)
class LedgerRow:
    action_id: str
    action: str
    rule: str
    requested_at: float
    outcome: str
    finished_at: float | None
    detail: str
    fault_returned: bool


def ledger(cur: Cursor, incident_id: str) -> list[LedgerRow]:
    rows = fetch(
        cur,
        "SELECT action_id, action, rule, epoch(requested_at), outcome, epoch(finished_at), detail, "
        "fault_returned FROM incident_actions WHERE incident_id = ? ORDER BY requested_at",
        [incident_id],
    )
    return [
        LedgerRow(str(r[0]), str(r[1]), str(r[2]), float(r[3]), str(r[4]), r[5], str(r[6]), bool(r[7]))
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class Breaker:
    tripped: bool
    tripped_at: float | None
    reason: str


def breaker(cur: Cursor) -> Breaker | None:
    rows = fetch(cur, "SELECT tripped, epoch(tripped_at), reason FROM breaker_state WHERE id = 1")
    if not rows:
        return None
    r = rows[0]
    return Breaker(bool(r[0]), None if r[1] is None else float(r[1]), str(r[2]))


@dataclass(frozen=True, slots=True)
class OperatorRow:
    ts: float
    incident_id: str
    action: str
    note: str
    silence_until: float | None
    outcome: str


def operator_actions(cur: Cursor, incident_ids: list[str]) -> list[OperatorRow]:
    """Newest first, for the given incidents."""
    if not incident_ids:
        return []
    rows = fetch(
        cur,
        "SELECT epoch(ts), incident_id, action, note, epoch(silence_until), outcome FROM operator_actions "
        "WHERE incident_id IN (SELECT unnest(?)) ORDER BY ts DESC LIMIT 1000",
        [incident_ids],
    )
    return [OperatorRow(float(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], str(r[5])) for r in rows]
