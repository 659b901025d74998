"""Alert deliveries: the outbox by status and endpoint, the latest attempts, dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import TS, Cursor, Row, as_int, fetch

MAX_ROWS: Final = 500


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    endpoint: str
    status: str
    alerts: int
    oldest: float


def outbox_status(cur: Cursor) -> list[EndpointStatus]:
    rows = fetch(
        cur,
        "SELECT endpoint, status, count(*), epoch(min(created_at)) FROM alert_outbox "
        "GROUP BY 1, 2 ORDER BY 1, 2",
    )
    return [EndpointStatus(str(r[0]), str(r[1]), as_int(r[2]), float(r[3])) for r in rows]


@dataclass(frozen=True, slots=True)
class AlertRow:
    alert_id: str
    endpoint: str
    incident_id: str
    event: str
    severity: str
    created_at: float
    status: str
    attempts: int
    delivered_at: float | None
    last_error: str


_ALERT_COLUMNS: Final = (
    "alert_id, endpoint, incident_id, event, severity, epoch(created_at), status, attempts, "
    "epoch(delivered_at), last_error"
)


def _alert(r: Row) -> AlertRow:
    return AlertRow(
        str(r[0]),
        str(r[1]),
        str(r[2]),
        str(r[3]),
        str(r[4]),
        float(r[5]),
        str(r[6]),
        as_int(r[7]),
        r[8],
        str(r[9]),
    )


def alerts(
    cur: Cursor, since: float, status: str | None = None, incident_id: str | None = None
) -> list[AlertRow]:
    """Alerts created since `since` (and every one not delivered), newest first."""
    rows = fetch(
        cur,
        f"SELECT {_ALERT_COLUMNS} FROM alert_outbox WHERE (created_at >= {TS} OR status <> 'delivered') "
        "AND (? IS NULL OR status = ?) AND (? IS NULL OR incident_id = ?) "
        f"ORDER BY created_at DESC LIMIT {MAX_ROWS}",
        [since, status, status, incident_id, incident_id],
    )
    return [_alert(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Attempt:
    alert_id: str
    endpoint: str
    attempt: int
    ts: float
    status_code: int | None
    outcome: str
    error: str
    duration_seconds: float


def attempts(cur: Cursor, since: float, until: float) -> list[Attempt]:
    rows = fetch(
        cur,
        f"SELECT alert_id, endpoint, attempt, epoch(ts), status_code, outcome, error, duration_seconds "
        f"FROM alert_deliveries WHERE ts >= {TS} AND ts <= {TS} ORDER BY ts DESC LIMIT {MAX_ROWS}",
        [since, until],
    )
    return [
        Attempt(str(r[0]), str(r[1]), as_int(r[2]), float(r[3]), r[4], str(r[5]), str(r[6]), float(r[7]))
        for r in rows
    ]
