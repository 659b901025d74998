"""Repair outcomes (store migration 14): for each Slurm drain fleetguard made, what happened next and whether
it held.

One row per drain (its action id from the incident ledger): when the node went out, the self-check asked of
the host's agent and its verdict, when the node came back, and whether the same fault came back on the same
host and component within the escalation window after it did (`held` false: the repair did not hold, and
the next incident of that fault goes a step up the ladder or pages). The repair loop writes them
(fleetguard.controller.fleet_repairs); the dashboard and `fleetguard repairs` read `repair_summary`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import duckdb

from fleetguard.store.incident_tables import epoch_sql, ts_sql

REPAIR_DDL = (
    """CREATE TABLE IF NOT EXISTS repair_outcomes (
  repair_id VARCHAR PRIMARY KEY,
  incident_id VARCHAR NOT NULL,
  incident_key VARCHAR NOT NULL,
  host VARCHAR NOT NULL,
  component_kind VARCHAR NOT NULL,
  component_id VARCHAR NOT NULL,
  fault VARCHAR NOT NULL,
  node VARCHAR NOT NULL,
  action VARCHAR NOT NULL,
  drained_at TIMESTAMP NOT NULL,
  state VARCHAR NOT NULL,
  detail VARCHAR NOT NULL,
  selfcheck_command VARCHAR,
  selfcheck_at TIMESTAMP,
  selfcheck_passed BOOLEAN,
  selfcheck_detail VARCHAR NOT NULL,
  selfcheck_failures INTEGER NOT NULL,
  resumed_at TIMESTAMP,
  held BOOLEAN,
  returned_incident VARCHAR,
  returned_at TIMESTAMP,
  escalated BOOLEAN NOT NULL,
  updated_at TIMESTAMP NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS repair_outcomes_host ON repair_outcomes (host)",
)

MAX_DETAIL_CHARS = 400
MAX_OPEN_REPAIRS = 4096  # rows one pass reconciles: twice the hosts one controller is built for


class RepairState(StrEnum):
    DRAINED = "drained"  # out of service; waits for its incident or another repair on the host
    SELFCHECK_PENDING = "selfcheck_pending"  # the host's agent was asked for a self-check
    SELFCHECK_FAILED = "selfcheck_failed"  # stays out; the drain reason says why
    RESUMED = "resumed"  # fleetguard returned it after a passing self-check
    RESUMED_ELSEWHERE = "resumed_elsewhere"  # back in service, not by fleetguard (a person resumed it)
    TAKEN_OVER = "taken_over"  # someone else re-drained it with a reason of their own: never resumed here

    @property
    def out(self) -> bool:
        return self in OUT_STATES


OUT_STATES = frozenset(
    {RepairState.DRAINED, RepairState.SELFCHECK_PENDING, RepairState.SELFCHECK_FAILED, RepairState.TAKEN_OVER}
)


def create_repair_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in REPAIR_DDL:
        con.execute(sql)


@dataclass(frozen=True)
class NewDrain:
    """A Slurm drain in the incident ledger with no outcome row yet."""

    repair_id: str
    incident_id: str
    incident_key: str
    host: str
    component_kind: str
    component_id: str
    fault: str
    action: str
    drained_at: float


def new_drains(con: duckdb.DuckDBPyConnection, since: float) -> list[NewDrain]:
    """Drains and downs that went through Slurm (whoever carried them out: the controller, `up`) since
    `since`, not yet recorded."""
    rows = con.execute(
        "SELECT a.action_id, a.incident_id, i.incident_key, i.host, i.component_kind, i.component_id, "
        f"i.fault, a.action, {epoch_sql('coalesce(a.finished_at, a.requested_at)')} "
        "FROM incident_actions a JOIN incidents i USING (incident_id) "
        "LEFT JOIN repair_outcomes r ON r.repair_id = a.action_id "
        "WHERE r.repair_id IS NULL AND a.action IN ('drain', 'down') AND a.outcome = 'succeeded' "
        f"AND a.detail LIKE 'slurm node %' AND a.requested_at >= {ts_sql()} "
        "ORDER BY a.requested_at LIMIT ?",
        [since, MAX_OPEN_REPAIRS],
    ).fetchall()
    return [
        NewDrain(str(a), str(b), str(c), str(d), str(e), str(f), str(g), str(h), float(ts))
        for a, b, c, d, e, f, g, h, ts in rows
    ]


def insert_drain(con: duckdb.DuckDBPyConnection, drain: NewDrain, node: str, now: float) -> None:
    con.execute(
        "INSERT INTO repair_outcomes (repair_id, incident_id, incident_key, host, component_kind, "
        "component_id, fault, node, action, drained_at, state, detail, selfcheck_detail, "
        "selfcheck_failures, escalated, "
        f"updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {ts_sql()}, ?, '', '', 0, false, {ts_sql()}) "
        "ON CONFLICT DO NOTHING",
        [
            drain.repair_id,
            drain.incident_id,
            drain.incident_key,
            drain.host,
            drain.component_kind,
            drain.component_id,
            drain.fault,
            node,
            drain.action,
            drain.drained_at,
            RepairState.DRAINED.value,
            now,
        ],
    )


@dataclass(frozen=True)
class OpenRepair:
    repair_id: str
    incident_id: str
    host: str
    node: str
    state: RepairState


def open_repairs(con: duckdb.DuckDBPyConnection) -> list[OpenRepair]:
    """Repairs whose node has not come back yet, oldest first (bounded)."""
    rows = con.execute(
        "SELECT repair_id, incident_id, host, node, state FROM repair_outcomes "
        "WHERE list_contains(?, state) ORDER BY drained_at LIMIT ?",
        [sorted(s.value for s in OUT_STATES), MAX_OPEN_REPAIRS],
    ).fetchall()
    return [OpenRepair(str(a), str(b), str(c), str(d), RepairState(e)) for a, b, c, d, e in rows]


def set_state(
    con: duckdb.DuckDBPyConnection, repair_id: str, state: RepairState, detail: str, now: float
) -> None:
    """A step of the way back; coming back into service stamps `resumed_at` (once)."""
    back = state in (RepairState.RESUMED, RepairState.RESUMED_ELSEWHERE)
    con.execute(
        f"UPDATE repair_outcomes SET state = ?, detail = ?, updated_at = {ts_sql()}, "
        f"resumed_at = CASE WHEN ? THEN coalesce(resumed_at, {ts_sql()}) ELSE resumed_at END "
        "WHERE repair_id = ?",
        [state.value, detail[:MAX_DETAIL_CHARS], now, back, now, repair_id],
    )


def set_selfcheck(
    con: duckdb.DuckDBPyConnection,
    repair_id: str,
    command_id: str | None,
    passed: bool | None,
    detail: str,
    now: float,
) -> None:
    """The self-check asked for this repair (`passed` None: not answered yet). A failure is counted once per
    check (a verdict read again on a later pass is the same check)."""
    con.execute(
        "UPDATE repair_outcomes SET "
        "selfcheck_failures = selfcheck_failures + CASE WHEN ? = false AND "
        "(selfcheck_passed IS NULL OR selfcheck_passed OR selfcheck_command IS DISTINCT FROM ?) "
        "THEN 1 ELSE 0 END, "
        f"selfcheck_command = ?, selfcheck_passed = ?, selfcheck_detail = ?, selfcheck_at = {ts_sql()}, "
        f"updated_at = {ts_sql()} WHERE repair_id = ?",
        [passed, command_id, command_id, passed, detail[:MAX_DETAIL_CHARS], now, now, repair_id],
    )


def judge_held(con: duckdb.DuckDBPyConnection, window_seconds: float, now: float) -> list[tuple[str, str]]:
    """Decide `held` for repairs back in service: the same fault on the same host and component opened (or
    reopened) within `window_seconds` of the return -> held false, the incident named, and that incident's
    own repair marked escalated; a whole window without it -> held true. Returns (repair id, incident id)
    of each repair found not to have held."""
    returned = con.execute(
        "SELECT r.repair_id, r.incident_key, min(o.ts) FROM repair_outcomes r "
        "JOIN incident_openings o ON o.incident_key = r.incident_key AND o.ts > r.resumed_at "
        "AND o.ts <= r.resumed_at + to_microseconds(CAST(round(? * 1000000) AS BIGINT)) "
        "WHERE r.held IS NULL AND r.resumed_at IS NOT NULL GROUP BY r.repair_id, r.incident_key",
        [window_seconds],
    ).fetchall()
    out: list[tuple[str, str]] = []
    for repair_id, key, opened in returned:
        row = con.execute(
            "SELECT incident_id FROM incidents WHERE incident_key = ? AND opened_at <= ? "
            "ORDER BY opened_at DESC LIMIT 1",
            [key, opened],
        ).fetchone()
        incident_id = str(row[0]) if row else ""
        con.execute(
            f"UPDATE repair_outcomes SET held = false, returned_incident = ?, returned_at = ?, "
            f"updated_at = {ts_sql()} WHERE repair_id = ?",
            [incident_id, opened, now, repair_id],
        )
        con.execute(
            f"UPDATE repair_outcomes SET escalated = true, updated_at = {ts_sql()} "
            "WHERE incident_id = ? AND drained_at >= ?",
            [now, incident_id, opened],
        )
        out.append((str(repair_id), incident_id))
    con.execute(
        f"UPDATE repair_outcomes SET held = true, updated_at = {ts_sql()} WHERE held IS NULL "
        f"AND resumed_at IS NOT NULL AND {epoch_sql('resumed_at')} + ? < ?",
        [now, window_seconds, now],
    )
    return out


def recent_returns(con: duckdb.DuckDBPyConnection, since: float) -> dict[str, float]:
    """incident key -> the latest time a repair of it came back into service, since `since`: a fault of that
    key opening again within the window means the repair did not hold (the engine escalates)."""
    rows = con.execute(
        f"SELECT incident_key, max({epoch_sql('resumed_at')}) FROM repair_outcomes "
        f"WHERE resumed_at >= {ts_sql()} GROUP BY incident_key",
        [since],
    ).fetchall()
    return {str(key): float(ts) for key, ts in rows}


def prune_repairs(con: duckdb.DuckDBPyConnection, before: float) -> None:
    """Repairs decided (held or not) and last changed before `before` go; open ones stay."""
    con.execute(f"DELETE FROM repair_outcomes WHERE held IS NOT NULL AND updated_at < {ts_sql()}", [before])


@dataclass(frozen=True)
class FaultRepairs:
    """Per fault kind: how many repairs, how long their hosts were out, how often a repair held."""

    fault: str
    repairs: int
    out_now: int  # still out of service
    resumed: int  # back in service (by fleetguard or anyone)
    selfcheck_failures: int
    held: int
    not_held: int
    out_hours: float  # hosts' time out of service, summed (those still out: until now)
    median_out_hours: float

    @property
    def held_fraction(self) -> float | None:
        """Of the repairs decided, the share that held; None when none is decided yet."""
        decided = self.held + self.not_held
        return self.held / decided if decided else None

    def as_json(self) -> dict[str, object]:
        return {
            "fault": self.fault,
            "repairs": self.repairs,
            "out_now": self.out_now,
            "resumed": self.resumed,
            "selfcheck_failures": self.selfcheck_failures,
            "held": self.held,
            "not_held": self.not_held,
            "held_fraction": self.held_fraction,
            "out_hours": round(self.out_hours, 3),
            "median_out_hours": round(self.median_out_hours, 3),
        }


def repair_summary(con: duckdb.DuckDBPyConnection, since: float, now: float) -> list[FaultRepairs]:
    """Repairs drained since `since`, per fault kind, most hours out first."""
    out = f"(coalesce({epoch_sql('resumed_at')}, ?) - {epoch_sql('drained_at')}) / 3600.0"
    rows = con.execute(
        "SELECT fault, count(*), count(*) FILTER (WHERE resumed_at IS NULL), "
        "count(*) FILTER (WHERE resumed_at IS NOT NULL), sum(selfcheck_failures), "
        "count(*) FILTER (WHERE held), count(*) FILTER (WHERE NOT held), "
        f"sum(greatest({out}, 0)), median(greatest({out}, 0)) "
        f"FROM repair_outcomes WHERE drained_at >= {ts_sql()} "
        "GROUP BY fault ORDER BY 8 DESC, fault LIMIT 200",
        [now, now, since],
    ).fetchall()
    return [
        FaultRepairs(
            str(f), int(n), int(o), int(r), int(s or 0), int(h), int(nh), float(hours or 0), float(m or 0)
        )
        for f, n, o, r, s, h, nh, hours, m in rows
    ]


@dataclass(frozen=True)
class OutNode:
    """A repair whose node is still out of service, for operators: where it stands and why."""

    host: str
    node: str
    fault: str
    incident_id: str
    state: RepairState
    detail: str
    out_hours: float

    def as_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "node": self.node,
            "fault": self.fault,
            "incident_id": self.incident_id,
            "state": self.state.value,
            "detail": self.detail,
            "out_hours": round(self.out_hours, 3),
        }


def nodes_out(con: duckdb.DuckDBPyConnection, now: float, limit: int = 200) -> list[OutNode]:
    """Repairs still out of service, longest out first."""
    rows = con.execute(
        f"SELECT host, node, fault, incident_id, state, detail, (? - {epoch_sql('drained_at')}) / 3600.0 "
        "FROM repair_outcomes WHERE list_contains(?, state) ORDER BY drained_at LIMIT ?",
        [now, sorted(s.value for s in OUT_STATES), limit],
    ).fetchall()
    return [
        OutNode(str(h), str(n), str(f), str(i), RepairState(s), str(d), max(0.0, float(o)))
        for h, n, f, i, s, d, o in rows
    ]


MAX_SINCE_SECONDS = 10 * 365 * 86400.0  # a window past this is a typo, not a question


def repairs_document(con: duckdb.DuckDBPyConnection, since_seconds: float, now: float) -> dict[str, object]:
    """`fleetguard repairs --json` and GET /v1/repairs: repairs drained within `since_seconds` per fault
    kind, and the nodes out of service now. One document, so the file and a running process answer alike."""
    return {
        "since_seconds": since_seconds,
        "faults": [s.as_json() for s in repair_summary(con, now - since_seconds, now)],
        "out": [n.as_json() for n in nodes_out(con, now)],
    }
