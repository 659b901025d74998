"""The controller's incident task inside the writer's own transaction on a real store."""

from __future__ import annotations

from pathlib import Path

from fleetguard.clock import FakeClock
from fleetguard.config import load_config
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.store import Store
from tests.diagnosis.records import T0, gpu, xid


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


def _ledger_after_a_third_host(path: Path, restart: bool) -> list[tuple[str, str, str]]:
    """Four hosts heard from, reboots asked for on two, the controller restarted (or not), a third host's
    reboot: the ledger lines the controller writes in that round."""
    config = load_config(overrides={"store.path": str(path)})
    store = Store.open(path)
    try:
        task = IncidentTask(config, FakeClock(T0))
        with store.transaction() as con:
            task(con, T0)  # started: it reads what is stored from now on
        store.append([gpu(T0 + 1, host=h, remapped_rows_pending=False) for h in ("n0", "n1", "n2", "n3")])
        with store.transaction() as con:
            task(con, T0 + 1)
        store.append([xid(79, T0 + 2, host="n0"), xid(79, T0 + 2, host="n1")])
        with store.transaction() as con:
            task(con, T0 + 5)
        assert sorted(p.entry.host for p in task.pending_repairs) == ["n0", "n1"]
        if restart:  # systemd restarts the controller: a new process on the reopened store
            store.close()
            store = Store.open(path)
            task = IncidentTask(config, FakeClock(T0 + 10))
        store.append([xid(79, T0 + 10, host="n2")])
        with store.transaction() as con:
            task(con, T0 + 12)
        return [(a.host, a.outcome.value, a.detail) for c in task.last_changes for a in c.actions]
    finally:
        store.close()


def test_the_controller_holds_after_a_restart_the_repair_it_would_have_held_without_one(
    tmp_path: Path,
) -> None:
    """The defect this guards against: the breaker's counts went with the process, so a crash-looping
    controller asked for a third host's reboot the breaker had held ("3 of 4 hosts acted on within 300 s")."""
    restarted = _ledger_after_a_third_host(tmp_path / "restarted.duckdb", restart=True)
    assert restarted == _ledger_after_a_third_host(tmp_path / "running.duckdb", restart=False)
    [(host, outcome, detail)] = restarted
    assert (host, outcome) == ("n2", "held") and "3 of 4 hosts acted on within 300 s" in detail
