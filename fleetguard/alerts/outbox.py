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
    alert_event,
    alertmanager_alert,
    generic_body,
    pagerduty_body,
    slack_body,
)
from diagnosis.incident import IncidentChange
from fleetguard.settings.alerts import WebhookConfig, WebhookKind
from fleetguard.store.incident_tables import epoch_sql, ts_sql

MAX_BATCH = 256  # rows the relay claims per look
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


def outbox_rows(
    changes: Iterable[IncidentChange], webhooks: Sequence[WebhookConfig], now: float
) -> list[OutboxRow]:
    """One row per (alerting change, endpoint whose min_severity it reaches)."""
    rows = []
    for change in changes:
        event = alert_event(change)
        if event is None:
            continue
        incident = change.incident
        for hook in webhooks:
            if incident.severity.rank < hook.min_severity.rank:
                continue
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
    alert_id: str
    endpoint: str
    incident_id: str
    event: str
    body_json: str
    attempts: int


def due(con: duckdb.DuckDBPyConnection, now: float) -> list[DueAlert]:
    rows = con.execute(
        "SELECT alert_id, endpoint, incident_id, event, body_json, attempts FROM alert_outbox "
        f"WHERE status = 'pending' AND next_attempt_at <= {ts_sql()} "
        f"ORDER BY created_at, alert_id LIMIT {MAX_BATCH}",
        [now],
    ).fetchall()
    return [DueAlert(str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5])) for r in rows]


def next_due_at(con: duckdb.DuckDBPyConnection) -> float | None:
    row = con.execute(
        f"SELECT min({epoch_sql('next_attempt_at')}) FROM alert_outbox WHERE status = 'pending'"
    ).fetchall()
    return None if not row or row[0][0] is None else float(row[0][0])


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
            f"delivered_at = CASE WHEN ? THEN {ts_sql()} ELSE delivered_at END, last_error = ? "
            "WHERE alert_id = ?",
            [
                new_status.value,
                attempt,
                next_attempt_at,
                new_status is AlertStatus.DELIVERED,
                now,
                error[:MAX_ERROR_CHARS],
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
            f"UPDATE alert_outbox SET status = 'pending', attempts = 0, next_attempt_at = {ts_sql()}, "
            f"last_error = '' WHERE {where}",
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
        "(PARTITION BY incident_id ORDER BY created_at DESC, alert_id DESC) AS n FROM alert_outbox "
        "WHERE endpoint = ?) WHERE n = 1 AND event <> 'resolved' AND status = 'delivered'",
        [endpoint],
    ).fetchall()
    return [str(r[0]) for r in rows]


def counts(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], int]:
    """Outbox rows per (endpoint, status), for /metrics and `fleetguard alerts`."""
    rows = con.execute("SELECT endpoint, status, count(*) FROM alert_outbox GROUP BY ALL").fetchall()
    return {(str(e), str(s)): int(n) for e, s, n in rows}
