"""What a pass of the way back records in `repair_outcomes` (fleetguard.store.repair_tables): the drains the
ledger holds that have no row yet, which returned repairs held, and each open repair's step. Shared by the
controller's loop for the fleet and `fleetguard up`'s return task for its own node."""

from __future__ import annotations

import duckdb

from fleetguard.actions.slurm_return import ReturnResult, ReturnStep
from fleetguard.settings.actions import SlurmConfig
from fleetguard.store.repair_tables import (
    OpenRepair,
    RepairState,
    insert_drain,
    judge_held,
    new_drains,
    prune_repairs,
    set_selfcheck,
    set_state,
)


def note_drains(
    con: duckdb.DuckDBPyConnection, slurm: SlurmConfig, window_seconds: float, keep_seconds: float, now: float
) -> list[tuple[str, str]]:
    """Rows for new drains, `held` decided where it can be, old decided rows pruned; (repair id, incident
    id) of each repair found not to have held (call inside a transaction)."""
    for drain in new_drains(con, now - window_seconds):
        insert_drain(con, drain, slurm.node_for(drain.host), now)
    unheld = judge_held(con, window_seconds, now)
    prune_repairs(con, now - max(window_seconds, keep_seconds))
    return unheld


def record_step(
    con: duckdb.DuckDBPyConnection,
    repairs: list[OpenRepair],
    result: ReturnResult,
    command: str | None,
    now: float,
) -> None:
    """One host's pass for each of its open repairs. `command`: the self-check command asked of its agent
    (None where the check runs in this process)."""
    step = result.step
    for repair in repairs:
        rid = repair.repair_id
        if step is ReturnStep.RESUMED:
            set_selfcheck(con, rid, command, True, "passed", now)
            set_state(con, rid, RepairState.RESUMED, result.detail, now)
        elif step is ReturnStep.IN_SERVICE:
            set_state(con, rid, RepairState.RESUMED_ELSEWHERE, "in service, not by fleetguard", now)
        elif step is ReturnStep.NOT_OURS:
            set_state(con, rid, RepairState.TAKEN_OVER, result.detail, now)
        elif step is ReturnStep.SELFCHECK_PENDING:
            set_selfcheck(con, rid, command, None, "asked", now)
            set_state(con, rid, RepairState.SELFCHECK_PENDING, result.detail, now)
        elif step is ReturnStep.SELFCHECK_FAILED:
            set_selfcheck(con, rid, command, False, result.detail, now)
            set_state(con, rid, RepairState.SELFCHECK_FAILED, result.detail, now)
        elif step in (ReturnStep.INCIDENT_OPEN, ReturnStep.OTHERS_OPEN, ReturnStep.JOBS_RUNNING):
            set_state(con, rid, RepairState.DRAINED, result.detail, now)
        else:  # FAILED: Slurm did not answer; the state stands, the detail says why
            set_state(con, rid, repair.state, result.detail, now)


class Transaction:
    """BEGIN ... COMMIT on a connection of the caller's own thread (ROLLBACK on error)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def __enter__(self) -> duckdb.DuckDBPyConnection:
        self.con.execute("BEGIN TRANSACTION")
        return self.con

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        self.con.execute("ROLLBACK" if kind is not None else "COMMIT")
