"""Drain, down and resume through a real one-node Slurm (munged, slurmctld, slurmd on loopback)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from fleetguard.actions.slurm import NodeState, SlurmNodes, SlurmOutcome, drain_reason, parse_node
from tests.slurm.cluster import NODE, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _nodes(slurm: SlurmCluster) -> SlurmNodes:
    return SlurmNodes(slurm_conf=str(slurm.conf), timeout_seconds=15)


def _until(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)  # polling a real slurm cluster: it offers no event to wait on
    raise TimeoutError("condition never held")


def _back_in_service(slurm: SlurmCluster) -> None:
    slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")
    _until(lambda: not _nodes(slurm).state(NODE).out_of_service)


def test_a_drain_lets_the_running_job_finish_then_the_node_resumes(slurm: SlurmCluster) -> None:
    nodes = _nodes(slurm)
    job = slurm.sbatch("sleep 3")
    _until(lambda: slurm.job_state(job) == "RUNNING")
    result = nodes.take_out(NODE, "inc-7f3a", "XID 79 on GPU 3: fallen off the bus")
    assert result.outcome is SlurmOutcome.DRAINED, result.detail
    assert result.state is not None and result.state.jobs_running  # DRAINING: the job goes on
    state = nodes.state(NODE)
    assert "DRAIN" in state.states
    assert state.reason == "fleetguard inc-7f3a: XID 79 on GPU 3: fallen off the bus"
    assert state.incident_id() == "inc-7f3a"
    # Asked again (a retried action, a second agent round): nothing changes.
    assert nodes.take_out(NODE, "inc-7f3a", "XID 79 again").outcome is SlurmOutcome.ALREADY
    _until(lambda: slurm.job_state(job) == "", timeout=60)  # the job finished, it was not killed
    assert (slurm.root / f"job-{job}.out").exists()
    drained = nodes.state(NODE)
    assert drained.out_of_service and not drained.jobs_running
    resumed = nodes.resume(NODE, "inc-7f3a")
    assert resumed.outcome is SlurmOutcome.RESUMED, resumed.detail
    assert not nodes.state(NODE).out_of_service
    assert nodes.resume(NODE).outcome is SlurmOutcome.NOT_DRAINED


def test_a_node_a_person_drained_is_left_alone(slurm: SlurmCluster) -> None:
    nodes = _nodes(slurm)
    slurm.scontrol("update", f"NodeName={NODE}", "State=DRAIN", "Reason=bad fan, ticket 4711 (alice)")
    try:
        taken = nodes.take_out(NODE, "inc-1", "XID 48")
        assert taken.outcome is SlurmOutcome.OTHERS
        resumed = nodes.resume(NODE)
        assert resumed.outcome is SlurmOutcome.NOT_OURS
        state = nodes.state(NODE)
        assert state.out_of_service and state.reason == "bad fan, ticket 4711 (alice)"
    finally:
        _back_in_service(slurm)


def test_fleetguard_resumes_only_the_incident_that_drained_the_node(slurm: SlurmCluster) -> None:
    nodes = _nodes(slurm)
    assert nodes.take_out(NODE, "inc-a", "XID 79").outcome is SlurmOutcome.DRAINED
    try:
        assert nodes.resume(NODE, "inc-b").outcome is SlurmOutcome.NOT_OURS
        assert nodes.state(NODE).out_of_service
    finally:
        assert nodes.resume(NODE, "inc-a").outcome is SlurmOutcome.RESUMED


def test_down_only_when_asked_and_confirmed(slurm: SlurmCluster) -> None:
    nodes = _nodes(slurm)
    result = nodes.take_out(NODE, "inc-d", "row remap failure", down=True)
    try:
        assert result.outcome is SlurmOutcome.DOWNED, result.detail
        assert "DOWN" in nodes.state(NODE).states
    finally:
        assert nodes.resume(NODE, "inc-d").outcome is SlurmOutcome.RESUMED


def test_with_slurmctld_unreachable_the_action_fails_clearly_and_works_once_it_answers(
    slurm: SlurmCluster,
) -> None:
    down = SlurmNodes(slurm_conf=str(slurm.unreachable_conf()), timeout_seconds=5)
    failed = down.take_out(NODE, "inc-x", "XID 79")
    assert failed.outcome is SlurmOutcome.FAILED and "scontrol" in failed.detail
    assert not _nodes(slurm).state(NODE).out_of_service  # nothing half done
    nodes = _nodes(slurm)  # slurmctld answers again: the retried action goes through
    assert nodes.take_out(NODE, "inc-x", "XID 79").outcome is SlurmOutcome.DRAINED
    assert nodes.state(NODE).incident_id() == "inc-x"
    assert nodes.resume(NODE, "inc-x").outcome is SlurmOutcome.RESUMED


def test_parse_node_reads_states_flags_and_the_reason_without_its_signature() -> None:
    line = (
        "NodeName=gpu-a Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 State=MIXED+DRAIN ThreadsPerCore=1 "
        "Partitions=debug Reason=fleetguard inc-1: XID 79 on GPU 3 [root@2026-11-25T02:13:37]"
    )
    state = parse_node(line)
    assert state == NodeState("gpu-a", frozenset({"MIXED", "DRAIN"}), "fleetguard inc-1: XID 79 on GPU 3")
    assert state.ours and state.jobs_running and state.incident_id() == "inc-1"
    assert parse_node("NodeName=b State=IDLE Reason=(null)").reason == ""
    assert parse_node("NodeName=b State=DOWN* Reason=Not responding [slurm@2026]").states == {"DOWN"}


def test_a_reason_that_names_another_key_cannot_change_the_state_read() -> None:
    state = parse_node("NodeName=b State=IDLE+DRAIN Reason=oops State=IDLE NodeName=x [alice@t]")
    assert state.name == "b" and "DRAIN" in state.states and not state.ours


def test_the_drain_reason_is_one_printable_line_without_key_value_pairs() -> None:
    reason = drain_reason("inc-9", "line one\nline=two \x1b[31mred\x00")
    assert reason.startswith("fleetguard inc-9: line one line:two")
    assert "\n" not in reason and "=" not in reason and all(" " <= c <= "~" for c in reason)
    assert len(drain_reason("inc-9", "x" * 1000)) <= 180
