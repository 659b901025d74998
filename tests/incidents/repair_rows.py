"""Repair outcome rows written through the store's own functions (fleetguard.store.repair_tables), for the
readers' tests: the CLI and the dashboard."""

from __future__ import annotations

import duckdb

from fleetguard.store.repair_tables import NewDrain, RepairState, insert_drain, judge_held, set_state

HOUR = 3600.0
DAY = 24 * HOUR


def write_repairs(con: duckdb.DuckDBPyConnection, now: float) -> None:
    """xid:79: two repairs back in service (one held, one did not); xid:95: one still out, its self-check
    failed."""

    def drain(n: int, host: str, fault: str, at: float) -> str:
        repair_id = f"a-{n}"
        insert_drain(
            con,
            NewDrain(repair_id, f"inc-{n}", f"{host}|gpu|0|{fault}", host, "gpu", "0", fault, "drain", at),
            f"{host}-slurm",
            at,
        )
        return repair_id

    held = drain(1, "node1", "xid:79", now - 20 * DAY)
    set_state(con, held, RepairState.RESUMED, "self-check passed; resumed", now - 20 * DAY + 2 * HOUR)
    returned = drain(2, "node2", "xid:79", now - 3 * DAY)
    set_state(con, returned, RepairState.RESUMED, "self-check passed; resumed", now - 3 * DAY + 4 * HOUR)
    con.execute(
        "INSERT INTO incident_openings VALUES "
        "('node2|gpu|0|xid:79', make_timestamp(CAST(? * 1000000 AS BIGINT)))",
        [now - 2 * DAY],
    )
    out = drain(3, "node3", "xid:95", now - 6 * HOUR)
    set_state(
        con, out, RepairState.SELFCHECK_FAILED, "self-check failed: compute gpu:0: mismatch", now - HOUR
    )
    judge_held(con, 7 * DAY, now)
