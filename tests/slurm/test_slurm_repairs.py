"""The incident service drains through a real Slurm: a fatal XID's incident id lands in the node's reason,
a node somebody else drained is left alone, and an unreachable slurmctld is a failed action that says so and
is tried again until Slurm answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.rules import Signals
from fleetguard.actions.slurm import SlurmNodes
from fleetguard.clock import FakeClock
from fleetguard.config import load_config
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.incidents.extension import carry_out_repairs, transaction
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.actions import SlurmConfig
from fleetguard.settings.diagnosis import DiagnosisConfig
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from fleetguard.store.operator_requests import Request, leave
from tests.diagnosis.records import T0, xid
from tests.slurm.cluster import NODE, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

# The shipped policy reboots a node on XID 79; this site drains it through Slurm instead.
POLICY = {"xid": {"79": {"action": "drain"}}}


def _service(
    store: Store, slurm: SlurmCluster, timeout: float = 15, conf: str | None = None
) -> IncidentService:
    config = SlurmConfig(
        enabled=True, slurm_conf=conf or str(slurm.conf), nodes={"node1": NODE}, timeout_seconds=timeout
    )
    executor = RepairExecutor(DiagnosisConfig(), slurm=config)
    return IncidentService.open(store.cursor(), load_policy(None, POLICY), T0, executor=executor)


def _resume(slurm: SlurmCluster) -> None:
    slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def test_a_fatal_xid_drains_the_node_with_the_incident_id_in_the_reason(
    store: Store, slurm: SlurmCluster
) -> None:
    service = _service(store, slurm)
    try:
        service.round(Signals(events=[xid(79, T0)]), T0 + 1)
        (incident_id,) = store.connection.execute("SELECT incident_id FROM incidents").fetchone() or ("",)
        rows = store.connection.execute("SELECT action, outcome, detail FROM incident_actions").fetchall()
        assert [(a, o) for a, o, _ in rows] == [("drain", "succeeded")], rows
        assert f"slurm node {NODE}: DRAIN: fleetguard {incident_id}:" in rows[0][2]
        state = SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE)
        assert "DRAIN" in state.states and state.incident_id() == incident_id
        assert "79" in state.reason
    finally:
        _resume(slurm)


def test_a_node_drained_by_a_person_is_not_taken_over(store: Store, slurm: SlurmCluster) -> None:
    slurm.scontrol("update", f"NodeName={NODE}", "State=DRAIN", "Reason=cable swap (bob)")
    try:
        _service(store, slurm).round(Signals(events=[xid(79, T0)]), T0 + 1)
        rows = store.connection.execute("SELECT outcome, detail FROM incident_actions").fetchall()
        assert rows[0][0] == "skipped" and "cable swap (bob)" in rows[0][1]
        assert SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).reason == "cable swap (bob)"
    finally:
        _resume(slurm)


def test_slurm_unreachable_is_a_failed_action_that_names_scontrol(store: Store, slurm: SlurmCluster) -> None:
    down = str(slurm.unreachable_conf())
    _service(store, slurm, timeout=5, conf=down).round(Signals(events=[xid(79, T0)]), T0 + 1)
    rows = store.connection.execute("SELECT outcome, detail FROM incident_actions").fetchall()
    assert rows[0][0] == "failed" and "scontrol" in rows[0][1], rows


def test_slurm_down_the_drain_is_retried_and_the_incident_ledger_says_so(
    store: Store, slurm: SlurmCluster
) -> None:
    """slurmctld unreachable: the drain fails naming scontrol and when it is tried again; slurmctld back,
    the engine asks again after the policy's delay and the node is drained, the ledger saying which attempt.
    Down and back is the config scontrol reads pointing at a port nothing listens on, then at the cluster's:
    restarting the module's slurmctld inside a test would leave a process the test does not own."""
    flaky = slurm.root / "slurm-flaky.conf"
    flaky.write_text(slurm.unreachable_conf().read_text())
    service = _service(store, slurm, timeout=5, conf=str(flaky))
    service.round(Signals(events=[xid(79, T0)]), T0 + 1)
    flaky.write_text(slurm.conf.read_text())  # slurmctld answers again
    try:
        service.round(Signals(), T0 + 30)  # before the delay: nothing is tried
        service.round(Signals(), T0 + 62)
        rows = store.connection.execute(
            "SELECT outcome, detail FROM incident_actions ORDER BY requested_at"
        ).fetchall()
        assert [o for o, _ in rows] == ["failed", "succeeded"], rows
        assert "scontrol" in rows[0][1] and rows[0][1].endswith("(tried again in 60 s)")
        assert rows[1][1].startswith(f"attempt 2 of 5: slurm node {NODE}: DRAIN: fleetguard ")
        (incident_id,) = store.connection.execute("SELECT incident_id FROM incidents").fetchone() or ("",)
        assert SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).incident_id() == incident_id
    finally:
        _resume(slurm)


def test_up_drains_its_own_node_through_the_breaker_and_the_ledger(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    """`up`'s own round and repair step (IncidentTask, carry_out_repairs): with the breaker open the drain is
    held and Slurm is never asked; released with the backlog, the node is drained and the ledger says so."""
    config = load_config(
        env={},
        overrides={
            "store.path": str(tmp_path / "up.duckdb"),
            "agent.host": "node1",
            "policy.xid": {"79": {"action": "drain"}},
            "policy.breaker": {"max_host_fraction": 0.5, "min_hosts": 2},
            "actions.slurm": {"enabled": True, "slurm_conf": str(slurm.conf), "nodes": {"node1": NODE}},
        },
    )
    clock = FakeClock(T0)
    executor = RepairExecutor(config.diagnosis, slurm=config.actions.slurm)
    with Store.open(config.store.path) as store:
        task = IncidentTask(config, clock)
        con = store.cursor()
        # two other hosts first: a's drain goes ahead (Slurm knows no node a: it fails), b trips the breaker
        store.append([xid(79, T0, host="a"), xid(79, T0 + 1, host="b"), xid(79, T0 + 2)])
        with transaction(con):
            task(con, T0 + 5)
        assert carry_out_repairs(task, executor, con, clock) == 1  # a's only
        try:
            ledger = con.execute("SELECT host, outcome FROM incident_actions ORDER BY host").fetchall()
            assert ("node1", "held") in ledger
            assert not SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).out_of_service
            leave(config.store.path, Request.BREAKER_RESET, {"process_backlog": True})
            with transaction(con):
                task(con, T0 + 60)
            carry_out_repairs(task, executor, con, clock)
            rows = con.execute("SELECT outcome, detail FROM incident_actions WHERE host = 'node1'").fetchall()
            assert ("succeeded", f"slurm node {NODE}: DRAIN") in [(o, d[: len(NODE) + 18]) for o, d in rows]
            assert SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).incident_id() is not None
        finally:
            _resume(slurm)
