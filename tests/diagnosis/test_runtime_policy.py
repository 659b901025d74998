"""Runtime action policy: restart, checkpoint, cordon, crash-loop stop and cooldown, as pure decisions."""

from __future__ import annotations

import json

import pytest

from diagnosis.host_evidence import HostEvidence, HostFault
from diagnosis.runtime_policy import (
    ActionPlan,
    ActionPolicyConfig,
    JobActionState,
    apply_plans,
    crash_looping,
    decide,
)
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.records.telemetry import EventKind

JOB = "job-1"
CFG = ActionPolicyConfig(restart_cost_seconds=300.0, cooldown_seconds=120.0)
# An XID 48 (double-bit ECC) the agent read from its own kernel log on the suspect's GPU.
XID_ON_ITS_GPU = HostEvidence((HostFault(990.0, EventKind.XID, "kmsg", 48, 0, "0000:3b:00.0", 4242),))


def finding(
    kind: FindingKind, ts: float = 1000.0, host: str | None = "h3", rank: int | None = 3, **evidence: object
) -> Finding:
    return Finding(
        ts=ts,
        finding_id=f"{kind}-{ts}",
        kind=kind,
        severity=Severity.CRITICAL,
        subject=f"job/{JOB}",
        summary=kind,
        host=host,
        job_id=JOB,
        rank=rank,
        evidence_json=json.dumps(evidence),
    )


def actions(plans: list[ActionPlan]) -> list[str]:
    return [p.action for p in plans]


def state() -> JobActionState:
    return JobActionState(JOB)


def carried_out(
    s: JobActionState, plans: list[ActionPlan], now: float, succeeded: bool = True
) -> JobActionState:
    """The state after the plans were ordered and each restart among them ran with this outcome."""
    s = apply_plans(s, plans, now)
    for p in plans:
        if p.action == "restart":
            s = s.with_restart_outcome(p.finding_id, succeeded)
    return s


def test_dead_rank_restarts_the_job_without_a_checkpoint() -> None:
    plans = decide(finding(FindingKind.DEAD_RANK), state(), CFG)
    assert actions(plans) == ["restart"]
    assert (plans[0].target, plans[0].finding_id) == (f"job/{JOB}", "dead_rank-1000.0")


def test_rank_error_restarts_the_job() -> None:
    assert actions(decide(finding(FindingKind.RANK_ERROR), state(), CFG)) == ["restart"]


def test_localised_hang_restarts_from_the_previous_checkpoint() -> None:
    plans = decide(finding(FindingKind.HANG_LOCALISED, hang_kind="host_stuck"), state(), CFG)
    assert actions(plans) == ["restart"]  # no checkpoint: stuck collectives cannot save


def test_hung_rank_alone_defers_to_its_localisation() -> None:
    assert actions(decide(finding(FindingKind.HUNG_RANK), state(), CFG)) == ["none"]


def test_collective_mismatch_is_alerted_not_restarted_or_evicted() -> None:
    cfg = ActionPolicyConfig(cordon_gpu_hang=True)
    plans = decide(
        finding(FindingKind.HANG_LOCALISED, hang_kind="collective_mismatch", evict_hardware=False),
        state(),
        cfg,
    )
    assert actions(plans) == ["none"]
    assert "program bug" in plans[0].reason


def test_blocked_gpu_stream_with_a_host_fault_on_its_gpu_cordons_the_host_when_configured() -> None:
    cfg = ActionPolicyConfig(cordon_gpu_hang=True)
    plans = decide(
        finding(FindingKind.HANG_LOCALISED, hang_kind="gpu_stream_blocked", evict_hardware=True),
        state(),
        cfg,
        XID_ON_ITS_GPU,
    )
    assert actions(plans) == ["restart", "cordon"]
    assert plans[1].target == "host/h3"
    assert "XID 48 on 0000:3b:00.0 (kmsg)" in plans[1].reason


def test_a_blocked_gpu_stream_only_ranks_report_restarts_the_job_and_never_cordons() -> None:
    # Attack #2 of issue 16: any local user can report two ranks, one "enqueued, not started".
    cfg = ActionPolicyConfig(cordon_gpu_hang=True, cordon_command_configured=True)
    plans = decide(
        finding(FindingKind.HANG_LOCALISED, hang_kind="gpu_stream_blocked", evict_hardware=True), state(), cfg
    )
    assert actions(plans) == ["restart", "none"]
    assert plans[1].target == "host/h3"
    assert "only the job's ranks report" in plans[1].reason


def test_blocked_gpu_stream_does_not_cordon_by_default() -> None:
    plans = decide(
        finding(FindingKind.HANG_LOCALISED, hang_kind="gpu_stream_blocked", evict_hardware=True), state(), CFG
    )
    assert actions(plans) == ["restart"]


def test_straggler_cheaper_than_a_restart_is_left_alone() -> None:
    plans = decide(finding(FindingKind.STRAGGLER, lost_seconds=120.0), state(), CFG)
    assert actions(plans) == ["none"]
    assert "300" in plans[0].reason


def test_straggler_costing_more_than_a_restart_checkpoints_then_restarts_without_its_host() -> None:
    plans = decide(finding(FindingKind.STRAGGLER, lost_seconds=301.0), state(), CFG)
    assert actions(plans) == ["checkpoint", "restart"]
    assert plans[1].host == "h3"


def test_straggler_restart_cordons_its_host_when_configured_and_the_host_saw_a_fault() -> None:
    cfg = ActionPolicyConfig(restart_cost_seconds=300.0, cordon_stragglers=True)
    assert actions(
        decide(finding(FindingKind.STRAGGLER, lost_seconds=400.0), state(), cfg, XID_ON_ITS_GPU)
    ) == [
        "checkpoint",
        "restart",
        "cordon",
    ]


def test_a_straggler_only_its_ranks_report_is_restarted_and_its_host_is_not_cordoned() -> None:
    cfg = ActionPolicyConfig(restart_cost_seconds=300.0, cordon_stragglers=True)
    plans = decide(finding(FindingKind.STRAGGLER, lost_seconds=400.0), state(), cfg)
    assert actions(plans) == ["checkpoint", "restart", "none"]
    assert "same hosts" in plans[1].reason
    assert "not cordoning h3" in plans[2].reason


def test_at_risk_gpu_checkpoints() -> None:
    assert actions(decide(finding(FindingKind.AT_RISK_GPU), state(), CFG)) == ["checkpoint"]


def test_at_risk_gpu_with_cordon_configured_checkpoints_restarts_and_cordons() -> None:
    cfg = ActionPolicyConfig(cordon_at_risk_gpu=True)
    assert actions(decide(finding(FindingKind.AT_RISK_GPU), state(), cfg)) == [
        "checkpoint",
        "restart",
        "cordon",
    ]


def test_repeated_at_risk_gpu_checkpoints_once_per_cooldown() -> None:
    s = apply_plans(state(), decide(finding(FindingKind.AT_RISK_GPU, ts=1000.0), state(), CFG), now=1000.0)
    assert actions(decide(finding(FindingKind.AT_RISK_GPU, ts=1060.0), s, CFG)) == ["none"]
    assert actions(decide(finding(FindingKind.AT_RISK_GPU, ts=1200.0), s, CFG)) == ["checkpoint"]


def test_job_slowdown_is_not_blamed_on_a_rank() -> None:
    assert actions(decide(finding(FindingKind.JOB_SLOWDOWN, rank=None, host=None), state(), CFG)) == ["none"]


def test_one_fault_gives_one_restart_within_the_cooldown() -> None:
    s = apply_plans(state(), decide(finding(FindingKind.DEAD_RANK, ts=1000.0), state(), CFG), now=1000.0)
    plans = decide(finding(FindingKind.HANG_LOCALISED, ts=1005.0, hang_kind="host_stuck"), s, CFG)
    assert actions(plans) == ["none"]
    assert "cooldown" in plans[0].reason


def test_fault_after_the_cooldown_restarts_again() -> None:
    s = apply_plans(
        state().with_checkpoint(100), decide(finding(FindingKind.DEAD_RANK, ts=1000.0), state(), CFG), 1000.0
    )
    assert actions(decide(finding(FindingKind.DEAD_RANK, ts=1200.0), s.with_checkpoint(200), CFG)) == [
        "restart"
    ]


def test_crash_loop_stops_after_three_restarts_without_checkpoint_progress() -> None:
    s = state().with_checkpoint(500)
    for k in range(3):
        ts = 1000.0 + 200 * k
        plans = decide(finding(FindingKind.DEAD_RANK, ts=ts), s, CFG)
        assert actions(plans) == ["restart"]
        s = carried_out(s, plans, ts)
    plans = decide(finding(FindingKind.DEAD_RANK, ts=1600.0), s, CFG)
    assert actions(plans) == ["stop_crash_loop"]
    assert "500" in plans[0].reason


def test_restarts_with_checkpoint_progress_are_not_a_crash_loop() -> None:
    s = state()
    for k in range(5):
        s = s.with_checkpoint(100 * (k + 1)).with_restart(1000.0 + 200 * k)
    assert not crash_looping(s, CFG, now=3000.0)
    assert actions(decide(finding(FindingKind.DEAD_RANK, ts=3000.0), s, CFG)) == ["restart"]


def test_job_that_never_checkpointed_is_a_crash_loop_after_three_restarts() -> None:
    s = state().with_restart(1.0).with_restart(300.0).with_restart(600.0)
    assert crash_looping(s, CFG, now=900.0)


def test_stopped_job_gets_no_more_actions_until_resumed() -> None:
    s = state().with_stop()
    assert actions(decide(finding(FindingKind.DEAD_RANK), s, CFG)) == ["none"]
    assert actions(decide(finding(FindingKind.DEAD_RANK), s.resumed(), CFG)) == ["restart"]


def test_stop_plan_marks_the_state_stopped() -> None:
    s = state().with_restart(1.0).with_restart(300.0).with_restart(600.0)
    assert apply_plans(s, decide(finding(FindingKind.DEAD_RANK, ts=900.0), s, CFG), 900.0).stopped


def test_checkpoint_steps_only_move_forward() -> None:
    assert state().with_checkpoint(200).with_checkpoint(100).latest_checkpoint_step == 200


def test_state_updates_do_not_mutate() -> None:
    s = state()
    s.with_restart(5.0)
    assert s.restarts == ()


def test_unknown_action_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown action"):
        ActionPlan("reboot", "job/x", "f", "why")


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max_restarts_without_progress"):
        ActionPolicyConfig(max_restarts_without_progress=0)


def test_a_restart_put_off_by_the_cooldown_says_when_to_plan_it_again() -> None:
    s = carried_out(state(), decide(finding(FindingKind.DEAD_RANK, ts=1000.0), state(), CFG), 1000.0)
    [plan] = decide(finding(FindingKind.HANG_LOCALISED, ts=1035.0, hang_kind="host_stuck"), s, CFG)
    assert (plan.action, plan.retry_at) == ("none", 1120.0)


def test_a_finding_planned_again_after_the_cooldown_restarts() -> None:
    s = carried_out(state(), decide(finding(FindingKind.DEAD_RANK, ts=1000.0), state(), CFG), 1000.0)
    [deferred] = decide(finding(FindingKind.HANG_LOCALISED, ts=1035.0, hang_kind="host_stuck"), s, CFG)
    assert deferred.retry_at is not None
    again = finding(FindingKind.HANG_LOCALISED, ts=deferred.retry_at, hang_kind="host_stuck")
    assert actions(decide(again, s, CFG)) == ["restart"]


def test_a_straggler_restart_does_not_claim_to_leave_its_host_out_without_a_cordon() -> None:
    plans = decide(finding(FindingKind.STRAGGLER, lost_seconds=301.0), state(), CFG)
    assert "without host" not in plans[1].reason
    assert "same hosts" in plans[1].reason


def test_a_straggler_slow_again_after_its_restart_is_left_to_a_person() -> None:
    s = carried_out(
        state(), decide(finding(FindingKind.STRAGGLER, ts=1000.0, lost_seconds=400.0), state(), CFG), 1000.0
    )
    plans = decide(finding(FindingKind.STRAGGLER, ts=2000.0, lost_seconds=400.0), s, CFG)
    assert actions(plans) == ["none"]
    assert "did not help" in plans[0].reason and "a person must look" in plans[0].reason


def test_a_straggler_slow_again_is_restarted_and_cordoned_when_its_host_can_be_cordoned() -> None:
    cfg = ActionPolicyConfig(cordon_stragglers=True, cordon_command_configured=True)
    s = carried_out(
        state(), decide(finding(FindingKind.STRAGGLER, ts=1000.0, lost_seconds=400.0), state(), cfg), 1000.0
    )
    plans = decide(finding(FindingKind.STRAGGLER, ts=2000.0, lost_seconds=400.0), s, cfg, XID_ON_ITS_GPU)
    assert actions(plans) == ["checkpoint", "restart", "cordon"]


def test_a_straggler_slow_again_without_host_evidence_is_left_to_a_person_even_with_cordon_on() -> None:
    cfg = ActionPolicyConfig(cordon_stragglers=True, cordon_command_configured=True)
    s = carried_out(
        state(), decide(finding(FindingKind.STRAGGLER, ts=1000.0, lost_seconds=400.0), state(), cfg), 1000.0
    )
    plans = decide(finding(FindingKind.STRAGGLER, ts=2000.0, lost_seconds=400.0), s, cfg)
    assert actions(plans) == ["none"]
    assert "a person must look" in plans[0].reason


def test_a_failed_straggler_restart_may_be_tried_again() -> None:
    first = decide(finding(FindingKind.STRAGGLER, ts=1000.0, lost_seconds=400.0), state(), CFG)
    s = carried_out(state(), first, 1000.0, succeeded=False)
    assert actions(decide(finding(FindingKind.STRAGGLER, ts=2000.0, lost_seconds=400.0), s, CFG)) == [
        "checkpoint",
        "restart",
    ]


def test_restarts_of_a_job_without_checkpoints_age_out_of_the_crash_loop_window() -> None:
    s = state()
    for ts in (0.0, 3600.0, 7200.0):
        s = carried_out(s, decide(finding(FindingKind.DEAD_RANK, ts=ts), s, CFG), ts)
    assert actions(decide(finding(FindingKind.DEAD_RANK, ts=7400.0), s, CFG)) == ["restart"]


def test_a_bad_crash_loop_window_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="crash_loop_window_seconds"):
        ActionPolicyConfig(crash_loop_window_seconds=0)


def test_a_failed_restart_does_not_count_toward_a_crash_loop() -> None:
    s = state().with_checkpoint(500)
    for k in range(3):
        ts = 1000.0 + 200 * k
        s = carried_out(s, decide(finding(FindingKind.DEAD_RANK, ts=ts), s, CFG), ts, succeeded=False)
    assert actions(decide(finding(FindingKind.DEAD_RANK, ts=1600.0), s, CFG)) == ["restart"]


def test_a_failed_restart_still_holds_the_cooldown() -> None:
    s = carried_out(
        state(), decide(finding(FindingKind.DEAD_RANK, ts=1000.0), state(), CFG), 1000.0, succeeded=False
    )
    assert actions(decide(finding(FindingKind.DEAD_RANK, ts=1005.0), s, CFG)) == ["none"]


def test_a_hang_of_a_job_spanning_hosts_is_left_to_the_controller_when_one_is_shipped_to() -> None:
    shipping = ActionPolicyConfig(controller_acts_on_multi_host_hangs=True)
    spanning = finding(FindingKind.HANG_LOCALISED, hang_kind="host_stuck", spans_hosts=True)
    [plan] = decide(spanning, state(), shipping)
    assert plan.action == "none" and "controller" in plan.reason
    # a one-host job is still this agent's to restart, and without a controller every hang is
    assert actions(
        decide(
            finding(FindingKind.HANG_LOCALISED, hang_kind="host_stuck", spans_hosts=False), state(), shipping
        )
    ) == ["restart"]
    assert actions(decide(spanning, state(), CFG)) == ["restart"]
