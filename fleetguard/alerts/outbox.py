"""The alert outbox: rows written with the incident change that caused them (see IncidentStore.persist),
then claimed, retried, delivered or dead-lettered by the relay. Every attempt is a row of alert_deliveries."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import duckdb

from diagnosis.alert_payloads import (
    AlertEvent,
    alert_events,
    alertmanager_alert,
    generic_body,
    pagerduty_body,
    slack_body,
)
from diagnosis.incident import IncidentChange
from fleetguard.settings.alerts import WebhookConfig, WebhookKind
from fleetguard.store.incident_tables import epoch_sql, ts_sql

MAX_BATCH = 256  # alerts per endpoint the relay looks at per round
MAX_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class OutboxRow:
    alert_id: str  # the webhook-id: the same on every retry
    endpoint: str
    incident_id: str
    event: str  # opened | updated | resolved
    severity: str
    created_at: float
    body_json: str


class AlertStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"  # the retry schedule ran out (or a 4xx that retrying cannot fix)
    GONE = "gone"  # 410: the endpoint asked never to be called again
    SILENCED = "silenced"  # a silence matched it when it was due: recorded, never sent


def outbox_rows(
    changes: Iterable[IncidentChange], webhooks: Sequence[WebhookConfig], now: float
) -> list[OutboxRow]:
    """One row per (alert of a change, endpoint whose min_severity it reaches), in the order they happened."""
    rows = []
    for change in changes:
        incident = change.incident
        events = alert_events(change)
        for event, hook in ((e, h) for e in events for h in webhooks):
            if incident.severity.rank < hook.min_severity.rank:
                continue
            if hook.kind is WebhookKind.ALERTMANAGER and event is not events[-1]:
                continue  # Alertmanager's one alert carries both: startsAt and endsAt
            body = _body(hook.kind, event, change, now)
            rows.append(
                OutboxRow(
                    alert_id=_alert_id(hook.name, change, event),
                    endpoint=hook.name,
                    incident_id=incident.incident_id,
                    event=event.short,
                    severity=incident.severity.value,
                    created_at=now,
                    body_json=json.dumps(body, separators=(",", ":"), sort_keys=True),
                )
            )
    return rows


def _body(kind: WebhookKind, event: AlertEvent, change: IncidentChange, now: float) -> Any:
    incident = change.incident
    if kind is WebhookKind.SLACK:
        return slack_body(event, incident)
    if kind is WebhookKind.PAGERDUTY:
        return pagerduty_body(event, incident)
    if kind is WebhookKind.ALERTMANAGER:
        return [alertmanager_alert(incident)]
    return generic_body(event, incident, now)


def _alert_id(endpoint: str, change: IncidentChange, event: AlertEvent) -> str:
    """The webhook-id: derived from what the alert is about, so the same change never makes two messages."""
    i = change.incident
    what = f"{endpoint}|{i.incident_id}|{event.value}|{i.returns}|{i.escalation_step}|{i.severity.value}"
    if event is AlertEvent.RESOLVED:
        what += f"|{i.resolved_at}"
    return "msg_" + hashlib.sha256(what.encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class DueAlert:
    """The oldest pending alert of one incident to one endpoint, with what a silence is matched against."""

    alert_id: str
    endpoint: str
    incident_id: str
    event: str
    body_json: str
    attempts: int
    next_attempt_at: float = 0.0
    schedule_step: int = 0
    severity: str = ""
    host: str = ""
    component: str = ""
    fault: str = ""

    def labels(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint,
            "incident_id": self.incident_id,
            "severity": self.severity,
            "host": self.host,
            "component": self.component,
            "fault": self.fault,
        }


# Up to MAX_BATCH heads per endpoint, so that one endpoint's backlog never hides another's alerts.
_HEADS = (
    "SELECT o.alert_id, o.endpoint, o.incident_id, o.event, o.body_json, o.attempts, "
    f"{epoch_sql('o.next_attempt_at')}, o.schedule_step, o.severity, coalesce(i.host, ''), "
    "coalesce(i.component_kind || ':' || i.component_id, ''), coalesce(i.fault, '') FROM ("
    "SELECT *, row_number() OVER (PARTITION BY endpoint ORDER BY created_at, seq, alert_id) AS k FROM ("
    "SELECT *, row_number() OVER "
    "(PARTITION BY endpoint, incident_id ORDER BY created_at, seq, alert_id) AS n "
    "FROM alert_outbox WHERE status = 'pending') WHERE n = 1) o "
    "LEFT JOIN incidents i ON i.incident_id = o.incident_id "
    f"WHERE o.k <= {MAX_BATCH} ORDER BY o.created_at, o.seq, o.alert_id"
)


def heads(con: duckdb.DuckDBPyConnection) -> list[DueAlert]:
    """The oldest pending alert per (endpoint, incident), oldest first: a later alert about an incident
    never leaves before an earlier one, whatever their schedules say."""
    return [
        DueAlert(
            str(r[0]),
            str(r[1]),
            str(r[2]),
            str(r[3]),
            str(r[4]),
            int(r[5]),
            float(r[6]),
            int(r[7] or 0),
            str(r[8]),
            str(r[9]),
            str(r[10]),
            str(r[11]),
        )
        for r in con.execute(_HEADS).fetchall()
    ]


def due(con: duckdb.DuckDBPyConnection, now: float) -> list[DueAlert]:
    """Heads whose own retry schedule has come round."""
    return [a for a in heads(con) if a.next_attempt_at <= now]


def make_due(con: duckdb.DuckDBPyConnection, endpoint: str, now: float) -> None:
    """The endpoint answers again: its whole backlog is due now (it drains oldest first, at its rate)."""
    con.execute(
        f"UPDATE alert_outbox SET next_attempt_at = {ts_sql()} WHERE endpoint = ? AND status = 'pending' "
        f"AND next_attempt_at > {ts_sql()}",
        [now, endpoint, now],
    )


def set_aside_after(con: duckdb.DuckDBPyConnection, alert: DueAlert, status: AlertStatus, why: str) -> None:
    """An alert dead-lettered: the same incident's later alerts to that endpoint follow it, so
    that a receiver never gets "resolved" for an incident whose "opened" it never got; `alerts replay`
    sends them again together, in order."""
    con.execute(
        "UPDATE alert_outbox SET status = ?, last_error = ? WHERE endpoint = ? AND incident_id = ? "
        "AND status = 'pending' AND alert_id <> ?",
        [status.value, why[:MAX_ERROR_CHARS], alert.endpoint, alert.incident_id, alert.alert_id],
    )


def pending_endpoints(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute("SELECT DISTINCT endpoint FROM alert_outbox WHERE status = 'pending'").fetchall()
    return [str(r[0]) for r in rows]


def opening_silenced(con: duckdb.DuckDBPyConnection, alert: DueAlert) -> bool:
    """Nothing about this incident reached the endpoint, because a silence muted it."""
    row = con.execute(
        "SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'silenced') "
        "FROM alert_outbox WHERE endpoint = ? AND incident_id = ? AND alert_id <> ?",
        [alert.endpoint, alert.incident_id, alert.alert_id],
    ).fetchall()
    return bool(row) and int(row[0][0]) == 0 and int(row[0][1]) > 0


def mark_silenced(con: duckdb.DuckDBPyConnection, alert: DueAlert, silence_id: str, now: float) -> None:
    con.execute(
        f"UPDATE alert_outbox SET status = 'silenced', last_error = ?, next_attempt_at = {ts_sql()} "
        "WHERE alert_id = ?",
        [f"silenced by {silence_id}", now, alert.alert_id],
    )


def record_attempt(
    con: duckdb.DuckDBPyConnection,
    alert: DueAlert,
    *,
    now: float,
    status_code: int | None,
    outcome: str,
    error: str,
    duration_seconds: float,
    new_status: AlertStatus,
    next_attempt_at: float,
    schedule_step: int | None = None,
) -> None:
    """The attempt's row and the outbox row's new state, in one transaction."""
    attempt = alert.attempts + 1
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            f"INSERT INTO alert_deliveries VALUES (?, ?, ?, {ts_sql()}, ?, ?, ?, ?)",
            [
                alert.alert_id,
                alert.endpoint,
                attempt,
                now,
                status_code,
                outcome,
                error[:MAX_ERROR_CHARS],
                duration_seconds,
            ],
        )
        con.execute(
            f"UPDATE alert_outbox SET status = ?, attempts = ?, next_attempt_at = {ts_sql()}, "
            f"delivered_at = CASE WHEN ? THEN {ts_sql()} ELSE delivered_at END, last_error = ?, "
            "schedule_step = ? WHERE alert_id = ?",
            [
                new_status.value,
                attempt,
                next_attempt_at,
                new_status is AlertStatus.DELIVERED,
                now,
                error[:MAX_ERROR_CHARS],
                alert.schedule_step if schedule_step is None else schedule_step,
                alert.alert_id,
            ],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def requeue_dead(con: duckdb.DuckDBPyConnection, now: float, endpoint: str | None = None) -> int:
    """Dead letters (and endpoints marked gone) back to pending, to be sent again from the start."""
    where = "status IN ('dead', 'gone')" + (" AND endpoint = ?" if endpoint else "")
    params: list[object] = [now] + ([endpoint] if endpoint else [])
    con.execute("BEGIN TRANSACTION")
    try:
        row = con.execute(
            f"UPDATE alert_outbox SET status = 'pending', attempts = 0, schedule_step = 0, "
            f"next_attempt_at = {ts_sql()}, last_error = '' WHERE {where}",
            params,
        ).fetchall()
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return int(row[0][0]) if row else 0


def open_alertmanager_alerts(con: duckdb.DuckDBPyConnection, endpoint: str) -> list[str]:
    """The latest delivered body of each incident whose latest alert to `endpoint` is not a resolve: what
    Alertmanager must keep hearing about, or it resolves the alert by itself."""
    rows = con.execute(
        "SELECT body_json FROM (SELECT body_json, event, status, row_number() OVER "
        "(PARTITION BY incident_id ORDER BY created_at DESC, seq DESC, alert_id DESC) AS n FROM alert_outbox "
        "WHERE endpoint = ?) WHERE n = 1 AND event <> 'resolved' AND status = 'delivered'",
        [endpoint],
    ).fetchall()
    return [str(r[0]) for r in rows]


def counts(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], int]:
    """Outbox rows per (endpoint, status), for /metrics and `fleetguard alerts`."""
    rows = con.execute("SELECT endpoint, status, count(*) FROM alert_outbox GROUP BY ALL").fetchall()
    return {(str(e), str(s)): int(n) for e, s, n in rows}
