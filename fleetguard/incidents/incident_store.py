"""Incidents in the store: read back after a restart, and every round's changes, their evidence and their
alerts written in ONE transaction, so an incident change and its outbox rows exist together or not at all.

The repair breaker's counts are not stored apart: a counted request is its ledger line (`breaker_counted`),
and `restore` rebuilds the breaker's window and hour from those lines, so a restarted controller weighs its
next repair exactly as the one that stopped would have (a crash loop cannot act on more of the fleet)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import duckdb

from diagnosis.breaker import BreakerHeadroom, BreakerState, counted_state
from diagnosis.incident import (
    ActionEntry,
    ActionOutcome,
    Incident,
    IncidentChange,
    IncidentState,
    Resolution,
)
from diagnosis.model import ComponentKind, IncidentKey, RepairAction, Severity
from fleetguard.alerts.outbox import OutboxRow
from fleetguard.records.rows import integer, number, number_or_none
from fleetguard.store.incident_tables import epoch_sql, ts_sql

_INCIDENT_COLUMNS = (
    "incident_id, incident_key, host, component_kind, component_id, fault, state, severity, action, rule, "
    "summary, first_seen, last_seen, occurrences, opened_at, resolved_at, closed_at, resolution, returns, "
    "escalation_step, sticky_seconds, updated_at, flaps"
)
_T = ts_sql()
_UPSERT_INCIDENT = (
    f"INSERT OR REPLACE INTO incidents ({_INCIDENT_COLUMNS}) VALUES "
    f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {_T}, {_T}, ?, {_T}, {_T}, {_T}, ?, ?, ?, ?, {_T}, ?)"
)
_UPSERT_ACTION = (
    "INSERT OR REPLACE INTO incident_actions (action_id, incident_id, host, action, rule, requested_at, "
    "outcome, finished_at, detail, fault_returned, breaker_counted) VALUES "
    f"(?, ?, ?, ?, ?, {_T}, ?, {_T}, ?, ?, ?)"
)
_INSERT_EVIDENCE = (
    f"INSERT INTO incident_evidence (incident_id, ts, kind, detail_json) VALUES (?, {_T}, ?, ?)"
)
_INSERT_OPENING = f"INSERT INTO incident_openings (incident_key, ts) VALUES (?, {_T})"
_INSERT_OUTBOX = (
    "INSERT OR IGNORE INTO alert_outbox (alert_id, endpoint, incident_id, event, severity, created_at, "
    "body_json, status, attempts, next_attempt_at, delivered_at, last_error, seq, schedule_step) VALUES "
    f"(?, ?, ?, ?, ?, {_T}, ?, 'pending', 0, {_T}, NULL, '', nextval('alert_outbox_seq'), 0)"
)

# Each writer sets only its own columns of the one breaker row: the trip (every persist) and the headroom
# (each round it changes) do not overwrite each other.
_UPSERT_BREAKER = (
    "INSERT INTO breaker_state (id, tripped, tripped_at, reason, updated_at, acted_since) "
    f"VALUES (1, ?, {_T}, ?, {_T}, {_T}) ON CONFLICT (id) DO UPDATE SET tripped = excluded.tripped, "
    "tripped_at = excluded.tripped_at, reason = excluded.reason, updated_at = excluded.updated_at, "
    "acted_since = excluded.acted_since"
)
_HEADROOM_COLUMNS = (
    "fleet_hosts",
    "hosts_acted",
    "window_seconds",
    "trips_at_hosts",
    "repairs_last_hour",
    "repairs_per_hour",
)
_UPSERT_HEADROOM = (
    "INSERT INTO breaker_state (id, tripped, reason, updated_at, "
    f"{', '.join(_HEADROOM_COLUMNS)}, headroom_at) "
    f"VALUES (1, false, '', {_T}, ?, ?, ?, ?, ?, ?, {_T}) ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*_HEADROOM_COLUMNS, "headroom_at"))
)


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    incident_id: str
    ts: float
    kind: str  # observation | gpu_sample | event | kernel_log | nic_counter | finding | heartbeat
    detail: dict[str, object]


@dataclass(frozen=True, slots=True)
class RestoredState:
    incidents: list[Incident]
    actions: list[ActionEntry]
    history: list[tuple[IncidentKey, float]]
    breaker: BreakerState


class IncidentStore:
    """Reads and writes incident tables through one connection of its own (a store cursor)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, own_transactions: bool = True) -> None:
        self.con = con
        # False when the caller already holds a transaction on `con` (the controller's writer tasks).
        self.own_transactions = own_transactions

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """All or nothing: its own transaction, or none when the caller already holds one."""
        if not self.own_transactions:
            yield
            return
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def restore(self, now: float, history_seconds: float, breaker_seconds: float) -> RestoredState:
        """What the engine held: incidents not closed with their ledger, openings within `history_seconds`,
        and the breaker with the requests it counted within `breaker_seconds` (`counting_horizon`)."""
        rows = self.con.execute(
            f"SELECT {_select_incident()} FROM incidents WHERE state <> 'closed'"
        ).fetchall()
        incidents = [_incident(r) for r in rows]
        ids = [i.incident_id for i in incidents]
        actions: list[ActionEntry] = []
        if ids:
            actions = [
                _action(r)
                for r in self.con.execute(
                    f"SELECT {_select_action()} FROM incident_actions WHERE incident_id IN "
                    f"(SELECT unnest(?)) ORDER BY requested_at",
                    [ids],
                ).fetchall()
            ]
        history = []
        for key, ts in self.con.execute(
            f"SELECT incident_key, {epoch_sql('ts')} FROM incident_openings WHERE ts >= {_T}",
            [now - history_seconds],
        ).fetchall():
            try:
                history.append((IncidentKey.parse(str(key)), float(ts)))
            except ValueError:  # a key this version cannot read: its escalation history starts afresh
                continue
        return RestoredState(incidents, actions, history, self._breaker(now - breaker_seconds))

    def _breaker(self, since: float) -> BreakerState:
        """The breaker's trip and last reset, and its counts from the ledger: every counted request since
        `since` (of any incident, closed ones too) that was not skipped (`CircuitBreaker.forget`)."""
        row = self.con.execute(
            f"SELECT tripped, {epoch_sql('tripped_at')}, reason, {epoch_sql('acted_since')} "
            "FROM breaker_state WHERE id = 1"
        ).fetchall()
        tripped, at, reason, acted_since = row[0] if row else (False, None, "", None)
        counted = self.con.execute(
            f"SELECT {epoch_sql('requested_at')}, host FROM incident_actions WHERE breaker_counted "
            f"AND outcome <> ? AND requested_at >= {_T}",
            [ActionOutcome.SKIPPED.value, since],
        ).fetchall()
        return counted_state(
            bool(tripped),
            number_or_none(at),
            str(reason),
            number_or_none(acted_since),
            ((number(when), str(host)) for when, host in counted),
        )

    def persist(
        self,
        changes: Sequence[IncidentChange],
        evidence: Iterable[EvidenceRow],
        outbox: Iterable[OutboxRow],
        breaker: BreakerState,
        now: float,
    ) -> None:
        """One transaction: incidents, actions, openings, evidence, outbox rows and the breaker's state."""
        with self._transaction():
            # One statement per table, whatever the number of changes: a round at fleet size changes
            # dozens of incidents and captures thousands of evidence rows.
            _insert_many(self.con, _UPSERT_INCIDENT, [_incident_params(c.incident, now) for c in changes])
            _insert_many(self.con, _UPSERT_ACTION, [_action_params(e) for c in changes for e in c.actions])
            openings = [[c.incident.key.text(), c.incident.last_seen] for c in changes if c.opened]
            _insert_many(self.con, _INSERT_OPENING, openings)
            evidence_rows = [
                [r.incident_id, r.ts, r.kind, json.dumps(r.detail, default=str, separators=(",", ":"))]
                for r in evidence
            ]
            _insert_many(self.con, _INSERT_EVIDENCE, evidence_rows)
            for alert in outbox:
                self.con.execute(
                    _INSERT_OUTBOX,
                    [
                        alert.alert_id,
                        alert.endpoint,
                        alert.incident_id,
                        alert.event,
                        alert.severity,
                        alert.created_at,
                        alert.body_json,
                        alert.created_at,
                    ],
                )
            self.con.execute(
                _UPSERT_BREAKER,
                [breaker.tripped, breaker.tripped_at, breaker.reason, now, breaker.acted_since],
            )

    def save_headroom(self, headroom: BreakerHeadroom, now: float, *, counts_only: bool = False) -> None:
        """How near the breaker and the rate limit were at `now` (its own columns: the trip stays); with
        `counts_only`, the counts and the time, and the fleet, threshold and limit as they were."""
        if counts_only:
            self.con.execute(
                f"UPDATE breaker_state SET hosts_acted = ?, repairs_last_hour = ?, headroom_at = {_T} "
                "WHERE id = 1 AND headroom_at IS NOT NULL",
                [headroom.hosts_acted, headroom.repairs_last_hour, now],
            )
            return
        self.con.execute(
            _UPSERT_HEADROOM,
            [
                now,
                headroom.fleet_hosts,
                headroom.hosts_acted,
                headroom.window_seconds,
                headroom.trips_at_hosts,
                headroom.repairs_last_hour,
                headroom.repairs_per_hour,
                now,
            ],
        )

    def prune(self, cutoff: float) -> None:
        """Forget what ended before `cutoff`: closed incidents with their evidence and ledger, finished
        alerts and their attempts, old openings. Open incidents and pending alerts are always kept."""
        t = _T
        statements = (
            f"DELETE FROM incident_evidence WHERE incident_id IN (SELECT incident_id FROM incidents "
            f"WHERE state = 'closed' AND closed_at < {t})",
            f"DELETE FROM incident_actions WHERE incident_id IN (SELECT incident_id FROM incidents "
            f"WHERE state = 'closed' AND closed_at < {t})",
            f"DELETE FROM incidents WHERE state = 'closed' AND closed_at < {t}",
            f"DELETE FROM incident_openings WHERE ts < {t}",
            f"DELETE FROM alert_outbox WHERE status <> 'pending' AND created_at < {t}",
            f"DELETE FROM alert_deliveries WHERE ts < {t}",
            f"DELETE FROM alert_silences WHERE expires_at < {t} OR ended_at < {t}",
        )
        with self._transaction():
            for sql in statements:
                self.con.execute(sql, [cutoff] * sql.count("?"))


_ARRAY_TYPES = {str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN"}


def _insert_many(con: duckdb.DuckDBPyConnection, statement: str, rows: list[list[object]]) -> None:
    """`statement` (an INSERT ... VALUES (?, ...) of this module) for every row in one statement: each `?`
    becomes the unnest of its column, typed from its values (NULL where every value is None)."""
    if not rows:
        return
    head, _, values = statement.partition(" VALUES ")
    columns = [list(c) for c in zip(*rows, strict=True)]
    exprs = values.strip()[1:-1].split(", ")
    params: list[list[object]] = []
    select = []
    placeholders = iter(columns)
    for expr in exprs:
        if "?" not in expr:
            select.append(expr)
            continue
        column = next(placeholders)
        array_type = _array_type(column)
        if array_type is None:
            select.append(expr.replace("?", "NULL"))
        else:
            select.append(expr.replace("?", f"unnest(?::{array_type}[])"))
            params.append(column)
    con.execute(f"{head} SELECT {', '.join(select)}", params)


def _array_type(values: list[object]) -> str | None:
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return None
    if kinds <= {int, float}:
        return "DOUBLE" if float in kinds else "BIGINT"
    return _ARRAY_TYPES.get(kinds.pop(), "VARCHAR") if len(kinds) == 1 else "VARCHAR"


def _select_incident() -> str:
    times = {"first_seen", "last_seen", "opened_at", "resolved_at", "closed_at", "updated_at"}
    return ", ".join(epoch_sql(c) if c in times else c for c in _INCIDENT_COLUMNS.split(", "))


def _select_action() -> str:
    cols = (
        "action_id",
        "incident_id",
        "host",
        "action",
        "rule",
        "requested_at",
        "outcome",
        "finished_at",
        "detail",
        "fault_returned",
        "breaker_counted",
    )
    return ", ".join(epoch_sql(c) if c in ("requested_at", "finished_at") else c for c in cols)


def _incident(r: Sequence[object]) -> Incident:
    return Incident(
        incident_id=str(r[0]),
        key=IncidentKey(str(r[2]), ComponentKind(str(r[3])), str(r[4]), str(r[5])),
        state=IncidentState(str(r[6])),
        severity=Severity(str(r[7])),
        action=RepairAction(str(r[8])),
        rule=str(r[9]),
        summary=str(r[10]),
        first_seen=number(r[11]),
        last_seen=number(r[12]),
        occurrences=integer(r[13]),
        opened_at=number(r[14]),
        resolved_at=number_or_none(r[15]),
        closed_at=number_or_none(r[16]),
        resolution=Resolution(str(r[17])),
        returns=integer(r[18]),
        escalation_step=integer(r[19]),
        sticky_seconds=number(r[20]),
        flaps=integer(r[22] or 0),
    )


def _action(r: Sequence[object]) -> ActionEntry:
    return ActionEntry(
        action_id=str(r[0]),
        incident_id=str(r[1]),
        host=str(r[2]),
        action=RepairAction(str(r[3])),
        rule=str(r[4]),
        requested_at=number(r[5]),
        outcome=ActionOutcome(str(r[6])),
        finished_at=number_or_none(r[7]),
        detail=str(r[8]),
        fault_returned=bool(r[9]),
        counted=bool(r[10]),
    )


def _incident_params(i: Incident, now: float) -> list[object]:
    k = i.key
    return [
        i.incident_id,
        k.text(),
        k.host,
        k.component_kind.value,
        k.component_id,
        k.fault,
        i.state.value,
        i.severity.value,
        i.action.value,
        i.rule,
        i.summary,
        i.first_seen,
        i.last_seen,
        i.occurrences,
        i.opened_at,
        i.resolved_at,
        i.closed_at,
        i.resolution.value,
        i.returns,
        i.escalation_step,
        i.sticky_seconds,
        now,
        i.flaps,
    ]


def _action_params(a: ActionEntry) -> list[object]:
    return [
        a.action_id,
        a.incident_id,
        a.host,
        a.action.value,
        a.rule,
        a.requested_at,
        a.outcome.value,
        a.finished_at,
        a.detail,
        a.fault_returned,
        a.counted,
    ]


def breaker_document(cur: duckdb.DuckDBPyConnection) -> dict[str, object]:
    """The breaker as `fleetguard breaker status` and `GET /v1/breaker` show it: open or closed, since when
    and why, and how near it and the rate limit were at the last round (`headroom`: None before the first
    round that weighed them)."""
    row = cur.execute(
        f"SELECT tripped, {epoch_sql('tripped_at')}, reason, {', '.join(_HEADROOM_COLUMNS)}, "
        f"{epoch_sql('headroom_at')} FROM breaker_state WHERE id = 1"
    ).fetchone()
    if row is None:
        return {"tripped": False, "since_ts": None, "reason": "", "headroom": None}
    tripped = bool(row[0])
    doc: dict[str, object] = {
        "tripped": tripped,
        "since_ts": number_or_none(row[1]) if tripped else None,
        "reason": str(row[2]) if tripped else "",
        "headroom": None,
    }
    if row[-1] is not None:
        values = dict(zip(_HEADROOM_COLUMNS, row[3:-1], strict=True))
        doc["headroom"] = {
            **{k: integer(v) for k, v in values.items() if k != "window_seconds"},
            "window_seconds": number(values["window_seconds"]),
            "as_of_ts": number(row[-1]),
        }
    return doc
