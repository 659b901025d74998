"""The controller's repair loop for the fleet on a real store, a real ingest writer and a real one-node Slurm,
on a fake clock: the controller drains through the incident ledger, asks the host's agent for a self-check
as a command (its ack stands in for the agent here; tests/slurm/test_fleet_repairs_agent.py runs a real
agent), resumes only on a pass, records each step in `repair_outcomes`, and escalates the next incident when
a repair did not hold."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetguard.actions.slurm import SlurmNodes
from fleetguard.actions.slurm_return import ReturnStep
from fleetguard.clock import FakeClock
from fleetguard.config import Config, load_config
from fleetguard.controller.command_queue import record_acks
from fleetguard.controller.fleet_repairs import FleetRepairs
from fleetguard.controller.ingest import IngestWriter
from fleetguard.controller.stats import ControllerStats
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.shipping.commands import CommandAck, CommandKind, CommandOutcome
from fleetguard.store import Store, repair_summary
from tests.diagnosis.records import T0, xid
from tests.slurm.cluster import NODE, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DAY = 86400.0


@dataclass
class Loop:
    store: Store
    clock: FakeClock
    task: IncidentTask
    repairs: FleetRepairs
    nodes: SlurmNodes

    def _at(self, at: float) -> None:
        self.clock.advance(at - self.clock.time())

    def fault(self, at: float) -> None:
        """An XID 79 on node1 stored at `at`, and the controller's incident round just after."""
        self.store.append([xid(79, at)])
        self._at(at + 5)
        with self.store.transaction() as con:
            self.repairs.incidents_task(con, at + 5)

    def resolve(self, incident_id: str, at: float) -> None:
        self._at(at)
        assert self.task.service is not None
        with self.store.transaction():
            assert self.task.service.resolve(incident_id, at)

    def reconcile(self, at: float) -> ReturnStep:
        self._at(at)
        results = self.repairs.reconcile(self.store.cursor())
        assert len(results) <= 1
        return results[0].step if results else ReturnStep.IN_SERVICE

    def answer_selfcheck(self, outcome: CommandOutcome, detail: str, at: float) -> str:
        """The host's agent acks the self-check the controller asked for (as its ingest batch would)."""
        rows = (
            self.store.cursor()
            .execute(
                "SELECT command_id FROM host_commands WHERE host = 'node1' AND kind = ? AND acked_ts IS NULL",
                [CommandKind.SELFCHECK.value],
            )
            .fetchall()
        )
        assert len(rows) == 1, rows
        with self.store.transaction() as con:
            record_acks(con, "node1", [CommandAck(str(rows[0][0]), outcome, detail)], at)
        return str(rows[0][0])

    def outcomes(self) -> list[tuple[object, ...]]:
        return (
            self.store.cursor()
            .execute(
                "SELECT incident_id, state, selfcheck_passed, selfcheck_failures, resumed_at IS NOT NULL, "
                "held, returned_incident, escalated FROM repair_outcomes ORDER BY drained_at"
            )
            .fetchall()
        )


def _config(tmp_path: Path, slurm: SlurmCluster) -> Config:
    return load_config(
        env={},
        overrides={
            "store.path": str(tmp_path / "fleet.duckdb"),
            "policy.xid": {"79": {"action": "drain"}},
            "actions.slurm": {
                "enabled": True,
                "slurm_conf": str(slurm.conf),
                "nodes": {"node1": NODE},
                "timeout_seconds": 15,
            },
        },
    )


@pytest.fixture
def loop(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Loop]:
    config = _config(tmp_path, slurm)
    clock = FakeClock(T0)
    with Store.open(config.store.path) as store:
        writer = IngestWriter(store, clock, ControllerStats())
        writer.start()
        task = IncidentTask(config, clock)
        try:
            yield Loop(
                store,
                clock,
                task,
                FleetRepairs(writer, task, config, clock),
                SlurmNodes(slurm_conf=str(slurm.conf)),
            )
        finally:
            writer.stop()
            slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def _incident(loop: Loop) -> str:
    state = loop.nodes.state(NODE)
    assert state.out_of_service, state
    incident_id = state.incident_id()
    assert incident_id is not None, state.reason
    return incident_id


def test_the_controller_drains_asks_for_a_selfcheck_and_resumes_on_a_pass(loop: Loop) -> None:
    loop.fault(T0)
    assert loop.repairs.carry_out_requested() == 1
    incident_id = _incident(loop)
    assert f"fleetguard {incident_id}:" in loop.nodes.state(NODE).reason
    ledger = loop.store.cursor().execute("SELECT action, outcome, detail FROM incident_actions").fetchall()
    assert ledger == [("drain", "succeeded", ledger[0][2])] and f"slurm node {NODE}" in ledger[0][2]

    assert loop.reconcile(T0 + 30) is ReturnStep.INCIDENT_OPEN  # no self-check while the fault is open
    assert loop.store.cursor().execute("SELECT count(*) FROM host_commands").fetchone() == (0,)
    loop.resolve(incident_id, T0 + 60)
    assert loop.reconcile(T0 + 90) is ReturnStep.SELFCHECK_PENDING
    assert loop.reconcile(T0 + 120) is ReturnStep.SELFCHECK_PENDING  # asked once, not again
    detail = loop.store.cursor().execute("SELECT detail FROM repair_outcomes").fetchone()
    # Nothing from the host yet: the operator is told where the check is stuck.
    assert detail is not None and "asked 30 s ago, not delivered yet" in detail[0]
    command_id = loop.answer_selfcheck(CommandOutcome.DONE, "passed: 5 checks in 3.2 s", T0 + 130)
    assert loop.reconcile(T0 + 150) is ReturnStep.RESUMED
    assert not loop.nodes.state(NODE).out_of_service
    row = (
        loop.store.cursor()
        .execute(
            "SELECT state, selfcheck_command, selfcheck_passed, epoch(resumed_at) - epoch(drained_at) "
            "FROM repair_outcomes"
        )
        .fetchone()
    )
    assert row is not None and row[:3] == ("resumed", command_id, True)
    assert 140 <= row[3] <= 150  # drained at T0 + 5, back at T0 + 150
    assert loop.reconcile(T0 + 180) is ReturnStep.IN_SERVICE  # nothing open any more


def test_a_failed_selfcheck_keeps_the_node_drained_and_is_recorded(loop: Loop) -> None:
    loop.fault(T0)
    loop.repairs.carry_out_requested()
    incident_id = _incident(loop)
    loop.resolve(incident_id, T0 + 60)
    assert loop.reconcile(T0 + 90) is ReturnStep.SELFCHECK_PENDING
    loop.answer_selfcheck(CommandOutcome.FAILED, "nic port:mlx5_0/1: state DOWN", T0 + 100)
    assert loop.reconcile(T0 + 120) is ReturnStep.SELFCHECK_FAILED
    assert loop.reconcile(T0 + 150) is ReturnStep.SELFCHECK_FAILED  # the same check: counted once
    state = loop.nodes.state(NODE)
    assert state.out_of_service and state.incident_id() == incident_id
    assert "self-check failed: nic port:mlx5_0/1: state DOWN" in state.reason
    assert loop.outcomes() == [(incident_id, "selfcheck_failed", False, 1, False, None, None, False)]
    # Asked again once the failure is old; a pass then brings the node back.
    assert loop.reconcile(T0 + 100 + 1000) is ReturnStep.SELFCHECK_PENDING
    loop.answer_selfcheck(CommandOutcome.DONE, "passed", T0 + 1200)
    assert loop.reconcile(T0 + 1230) is ReturnStep.RESUMED
    assert loop.outcomes()[0][1:5] == ("resumed", True, 1, True)


def test_a_node_drained_by_a_person_is_left_alone(loop: Loop, slurm: SlurmCluster) -> None:
    slurm.scontrol("update", f"NodeName={NODE}", "State=DRAIN", "Reason=hw: fan replaced, burn-in")
    loop.fault(T0)
    loop.repairs.carry_out_requested()
    state = loop.nodes.state(NODE)
    assert (
        state.out_of_service and state.reason.startswith("hw: fan replaced") and state.incident_id() is None
    )
    ledger = loop.store.cursor().execute("SELECT action, outcome FROM incident_actions").fetchall()
    assert ledger == [("drain", "skipped")]
    assert loop.reconcile(T0 + 60) is ReturnStep.IN_SERVICE  # no repair of ours to walk back
    assert loop.outcomes() == []
    assert loop.store.cursor().execute("SELECT count(*) FROM host_commands").fetchone() == (0,)
    assert loop.nodes.state(NODE).reason.startswith("hw: fan replaced")


def test_a_repair_that_did_not_hold_escalates_the_next_incident(loop: Loop) -> None:
    loop.fault(T0)
    loop.repairs.carry_out_requested()
    first = _incident(loop)
    loop.resolve(first, T0 + 60)
    loop.reconcile(T0 + 90)
    loop.answer_selfcheck(CommandOutcome.DONE, "passed", T0 + 100)
    assert loop.reconcile(T0 + 120) is ReturnStep.RESUMED

    # The same fault on the same GPU two days after the node came back: the repair did not hold.
    loop.fault(T0 + 2 * DAY)
    again = loop.task.last_changes
    assert again and again[0].incident.severity.value == "critical"  # a drain is off the ladder: it pages
    assert "did not hold" in again[0].incident.summary
    assert "escalated" in {k.value for k in again[0].kinds}
    loop.repairs.carry_out_requested()
    second = _incident(loop)
    loop.reconcile(T0 + 2 * DAY + 60)
    rows = loop.outcomes()
    assert [(r[0], r[5], r[6], r[7]) for r in rows] == [
        (first, False, second, False),
        (second, None, None, True),
    ]

    # The second repair holds: a whole window (7 days) after it returned, nothing came back.
    loop.resolve(second, T0 + 2 * DAY + 120)
    loop.reconcile(T0 + 2 * DAY + 150)
    loop.answer_selfcheck(CommandOutcome.DONE, "passed", T0 + 2 * DAY + 160)
    assert loop.reconcile(T0 + 2 * DAY + 180) is ReturnStep.RESUMED
    loop.reconcile(T0 + 10 * DAY)
    assert [r[5] for r in loop.outcomes()] == [False, True]
    [summary] = repair_summary(loop.store.cursor(), T0 - DAY, T0 + 10 * DAY)
    assert (summary.fault, summary.repairs, summary.held, summary.not_held, summary.out_now) == (
        "xid:79",
        2,
        1,
        1,
        0,
    )
    assert summary.held_fraction == 0.5 and 0 < summary.out_hours < 1


def test_the_selfcheck_waits_for_the_jobs_a_drain_lets_finish(loop: Loop, slurm: SlurmCluster) -> None:
    job = slurm.sbatch("sleep 8")
    deadline = time.monotonic() + 60
    while slurm.job_state(job) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    loop.fault(T0)
    loop.repairs.carry_out_requested()
    incident_id = _incident(loop)
    loop.resolve(incident_id, T0 + 60)
    assert loop.reconcile(T0 + 90) is ReturnStep.JOBS_RUNNING  # its GPUs are still the job's
    assert loop.store.cursor().execute("SELECT count(*) FROM host_commands").fetchone() == (0,)
    assert loop.outcomes()[0][1] == "drained"
    while slurm.job_state(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.job_state(job) == "", f"the job did not finish:\n{slurm.log_tails()}"
    assert loop.reconcile(T0 + 120) is ReturnStep.SELFCHECK_PENDING


def test_a_drain_requested_before_a_restart_is_carried_out_after_it(
    loop: Loop, tmp_path: Path, slurm: SlurmCluster
) -> None:
    loop.fault(T0)  # requested; the controller stops before its repair thread runs scontrol
    assert not loop.nodes.state(NODE).out_of_service
    config = _config(tmp_path, slurm)
    task = IncidentTask(config, loop.clock)
    restarted = FleetRepairs(loop.repairs.writer, task, config, loop.clock)
    with loop.store.transaction() as con:
        restarted.incidents_task(con, T0 + 30)
    assert restarted.carry_out_requested() == 1
    assert loop.nodes.state(NODE).incident_id() is not None
    ledger = loop.store.cursor().execute("SELECT action, outcome FROM incident_actions").fetchall()
    assert ledger == [("drain", "succeeded")]
    with loop.store.transaction() as con:
        restarted.incidents_task(con, T0 + 60)
    assert restarted.carry_out_requested() == 0  # carried out once
