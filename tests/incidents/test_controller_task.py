"""The controller's incident task inside the writer's own transaction on a real store."""

from __future__ import annotations

from pathlib import Path

from fleetguard.clock import FakeClock
from fleetguard.config import load_config
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.store import Store
from tests.diagnosis.records import T0, xid


def test_the_task_turns_committed_records_into_incidents_within_the_callers_transaction(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.duckdb"
    config = load_config(overrides={"store.path": str(path)})
    clock = FakeClock(T0)
    task = IncidentTask(config, clock)
    with Store.open(path) as store:
        with store.transaction() as con:
            task(con, T0)  # nothing yet
        store.append([xid(79, T0 + 1)])
        with store.transaction() as con:
            task(con, T0 + 5)
        requested = [a for c in task.last_changes for a in c.actions]
        assert [(a.action.value, a.outcome.value) for a in requested] == [("reboot_node", "requested")]
        with store.transaction() as con:
            task.action_finished(requested[0].action_id, requested[0].outcome.SUCCEEDED, "rebooted", T0 + 60)
        rows = store.connection.execute("SELECT outcome, detail FROM incident_actions").fetchall()
        assert rows == [("succeeded", "rebooted")]
        assert store.connection.execute("SELECT fault, state FROM incidents").fetchall() == [
            ("xid:79", "acting")
        ]


def test_a_repair_requested_just_before_a_restart_is_pending_again_after_it_and_only_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.duckdb"
    config = load_config(overrides={"store.path": str(path)})
    with Store.open(path) as store:
        before = IncidentTask(config, FakeClock(T0))
        with store.transaction() as con:
            before(con, T0)
        store.append([xid(79, T0 + 1)])
        with store.transaction() as con:
            before(con, T0 + 5)
        [asked] = [p.entry for p in before.pending_repairs]
        # the process stops here: the repair was requested and never carried out
        after = IncidentTask(config, FakeClock(T0 + 30))
        with store.transaction() as con:
            after(con, T0 + 30)
        assert [p.entry.action_id for p in after.pending_repairs] == [asked.action_id]
        assert after.pending_repairs[0].entry.outcome.value == "requested"
        with store.transaction() as con:
            after.action_finished(asked.action_id, asked.outcome.SUCCEEDED, "rebooted", T0 + 40)
            after(con, T0 + 45)
        assert after.pending_repairs == []
