"""A prediction never drains a running job and never counts toward the breaker; an at-risk GPU is drained
once nothing runs on it, through the engine and its breaker like any repair."""

from __future__ import annotations

from collectors.gpu_device import GpuProcesses
from diagnosis.drain_marks import IDLE_KIND, DrainMarks
from diagnosis.engine import IncidentEngine
from diagnosis.gpu_jobs import GpuUsage, RankProcess, join_gpu_jobs
from diagnosis.incident import ActionOutcome
from diagnosis.model import RepairAction
from diagnosis.rules import Signals
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.settings.policy_files import load_policy
from tests.diagnosis.records import T0

HORIZON = 6 * 3600.0


def _at_risk(gpu: str, host: str, ts: float = T0) -> Finding:
    return Finding(
        ts=ts,
        finding_id=f"risk-{gpu}",
        kind=FindingKind.AT_RISK_GPU,
        severity=Severity.WARNING,
        subject=f"{host}/{gpu}",
        summary=f"GPU {gpu} at risk",
        host=host,
        gpu_uuid=gpu,
    )


def _usage(gpu: str, pids: tuple[int, ...], ranks: list[RankProcess]) -> list[GpuUsage]:
    return join_gpu_jobs([GpuProcesses(gpu, 0, None, pids)], ranks)


def test_a_marked_gpu_is_due_only_once_its_job_has_ended() -> None:
    marks = DrainMarks()
    marks.mark(_at_risk("GPU-a", "n1"), 0.4, HORIZON)
    running = _usage("GPU-a", (100,), [RankProcess("job-1", 0, 100)])
    assert marks.due(running, T0 + 60) == [] and len(marks) == 1
    unknown_process = _usage("GPU-a", (200,), [])  # a compute process no reporting rank owns
    assert marks.due(unknown_process, T0 + 120) == []
    assert marks.due([], T0 + 150) == []  # the GPU not listed at all: its state is unknown, keep waiting
    idle = _usage("GPU-a", (), [])
    [due] = marks.due(idle, T0 + 180)
    assert due.kind == IDLE_KIND and due.gpu_uuid == "GPU-a" and due.host == "n1" and due.ts == T0 + 180
    assert len(marks) == 0 and marks.due(idle, T0 + 240) == []  # drained once


def test_marks_expire_with_the_horizon_and_are_bounded() -> None:
    marks = DrainMarks(max_marks=3)
    marks.mark(_at_risk("GPU-a", "n1"), 0.4, HORIZON)
    assert marks.due(_usage("GPU-a", (), []), T0 + HORIZON + 1) == []  # the prediction has expired
    for i in range(5):
        marks.mark(_at_risk(f"GPU-{i}", "n1", T0 + i), 0.4, HORIZON)
    assert len(marks) == 3
    idle = [u for i in range(5) for u in _usage(f"GPU-{i}", (), [])]
    assert sorted(f.gpu_uuid or "" for f in marks.due(idle, T0 + 10)) == ["GPU-2", "GPU-3", "GPU-4"]


def test_a_prediction_only_watches_and_the_idle_drain_is_a_counted_repair() -> None:
    policy = load_policy(
        overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 10}}
    )
    engine = IncidentEngine(policy)
    # at-risk findings on every host of the fleet: warnings that watch, nothing requested, no trip
    hosts = ["n1", "n2", "n3"]
    changes = engine.observe(Signals(findings=[_at_risk(f"GPU-{h}", h) for h in hosts]), T0)
    opened = [c.incident for c in changes]
    assert len(opened) == 3
    assert all(i.severity is Severity.WARNING and i.action is RepairAction.WATCH for i in opened)
    assert not any(c.actions for c in changes)
    assert not engine.breaker.tripped and len(engine.breaker.state.acted) == 0
    # the GPU's work ended: its drain goes through the engine like any repair, and is counted
    marks = DrainMarks()
    marks.mark(_at_risk("GPU-n1", "n1"), 0.4, HORIZON)
    idle = marks.due(_usage("GPU-n1", (), []), T0 + 60)
    changes = engine.observe(Signals(findings=idle), T0 + 60)
    requested = [a for c in changes for a in c.actions]
    assert [(a.action, a.outcome) for a in requested] == [(RepairAction.DRAIN, ActionOutcome.REQUESTED)]
    assert [h for _, h in engine.breaker.state.acted] == ["n1"]
