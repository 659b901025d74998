"""The way back to service through a real Slurm and a real store: a drained node waits for its incident,
runs the self-check, and resumes only when it passes; a failed self-check keeps it out with the reason."""

from __future__ import annotations

import pytest

from diagnosis.rules import Signals
from fleetguard.actions.slurm import SlurmNodes
from fleetguard.actions.slurm_return import NodeReturner, ReturnStep, SelfcheckVerdict
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.selfcheck.report import CheckResult, CheckState, SelfcheckReport
from fleetguard.settings.actions import SlurmConfig
from fleetguard.settings.diagnosis import DiagnosisConfig
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import T0, xid
from tests.slurm.cluster import NODE, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POLICY = {"xid": {"79": {"action": "drain"}}}


def _config(slurm: SlurmCluster) -> SlurmConfig:
    return SlurmConfig(enabled=True, slurm_conf=str(slurm.conf), nodes={"node1": NODE}, timeout_seconds=15)


def _report(state: CheckState) -> SelfcheckVerdict:
    detail = "bus bandwidth 3.1 GB/s (min 40)" if state is CheckState.FAILED else "ok"
    report = SelfcheckReport("node1", [CheckResult("allreduce", "host", state, detail)], T0, T0 + 1)
    return SelfcheckVerdict(report.passed, report.first_failure())


def _drained(store: Store, slurm: SlurmCluster) -> tuple[IncidentService, str]:
    executor = RepairExecutor(DiagnosisConfig(), slurm=_config(slurm))
    service = IncidentService.open(store.cursor(), load_policy(None, POLICY), T0, executor=executor)
    service.round(Signals(events=[xid(79, T0)]), T0 + 1)
    row = store.connection.execute("SELECT incident_id FROM incidents").fetchone()
    assert row is not None
    return service, str(row[0])


def test_the_node_waits_for_its_incident_then_resumes_after_a_passing_selfcheck(
    store: Store, slurm: SlurmCluster
) -> None:
    service, incident_id = _drained(store, slurm)
    checks: list[str] = []

    def selfcheck() -> SelfcheckVerdict:
        checks.append("ran")
        return _report(CheckState.PASSED)

    returner = NodeReturner(_config(slurm), selfcheck)
    try:
        waiting = returner.reconcile(store.cursor(), "node1")
        assert (waiting.step, waiting.incident_id) == (ReturnStep.INCIDENT_OPEN, incident_id)
        assert checks == []  # no self-check while the fault is open
        assert service.resolve(incident_id, T0 + 60)
        back = returner.reconcile(store.cursor(), "node1")
        assert back.step is ReturnStep.RESUMED, back.detail
        assert checks == ["ran"] and not SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).out_of_service
        assert returner.reconcile(store.cursor(), "node1").step is ReturnStep.IN_SERVICE
    finally:
        slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def test_a_failed_selfcheck_keeps_the_node_out_and_says_why(store: Store, slurm: SlurmCluster) -> None:
    service, incident_id = _drained(store, slurm)
    service.resolve(incident_id, T0 + 60)
    returner = NodeReturner(_config(slurm), lambda: _report(CheckState.FAILED))
    try:
        result = returner.reconcile(store.cursor(), "node1")
        assert result.step is ReturnStep.SELFCHECK_FAILED
        state = SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE)
        assert state.out_of_service and state.incident_id() == incident_id
        assert "self-check failed: allreduce host: bus bandwidth 3.1 GB/s" in state.reason
    finally:
        slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def test_another_open_host_repair_keeps_the_node_out(store: Store, slurm: SlurmCluster) -> None:
    service, first = _drained(store, slurm)
    # A double-bit error on another GPU drains too: the node's reason now names that incident.
    service.round(Signals(events=[xid(48, T0 + 5, pci="0000:1b:00")]), T0 + 6)
    row = store.connection.execute("SELECT incident_id FROM incidents WHERE fault = 'xid:48'").fetchone()
    assert row is not None
    second = str(row[0])
    assert SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).incident_id() == second
    assert service.resolve(second, T0 + 60)
    returner = NodeReturner(_config(slurm), lambda: _report(CheckState.PASSED))
    try:
        result = returner.reconcile(store.cursor(), "node1")
        assert result.step is ReturnStep.OTHERS_OPEN and f"{first} (xid:79)" in result.detail
        assert SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).out_of_service
    finally:
        slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")


def test_a_node_someone_else_drained_is_never_resumed(store: Store, slurm: SlurmCluster) -> None:
    slurm.scontrol("update", f"NodeName={NODE}", "State=DRAIN", "Reason=firmware update (carol)")
    ran: list[bool] = []

    def selfcheck() -> SelfcheckVerdict:
        ran.append(True)
        return _report(CheckState.PASSED)

    returner = NodeReturner(_config(slurm), selfcheck)
    try:
        assert returner.reconcile(store.cursor(), "node1").step is ReturnStep.NOT_OURS
        assert ran == [] and SlurmNodes(slurm_conf=str(slurm.conf)).state(NODE).out_of_service
    finally:
        slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")
