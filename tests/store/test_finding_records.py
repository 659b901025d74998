"""Every finding kind, raised by the code that detects it, round-trips through a real DuckDB store into a
typed record: its enums are members again, its evidence reads back through its kind's view. Garbled evidence
and unknown kinds from an old store or a peer are values, never exceptions."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from types import MappingProxyType

import pytest

from diagnosis.drain_marks import DrainMark, idle_finding
from fleetguard.controller.analysis import host_silent_finding
from fleetguard.controller.correlation import FleetFault, fleet_fault_finding
from fleetguard.controller.hosts import HostState
from fleetguard.incidents.feed import select_records
from fleetguard.predict.live import at_risk_findings
from fleetguard.records.evidence import (
    KEPT_UNREADABLE_CHARS,
    RECORDS,
    AtRiskEvidence,
    Evidence,
    FleetFaultEvidence,
    HangEvidence,
    HostSilentEvidence,
    HungRankEvidence,
    IdleEvidence,
    RankExitEvidence,
    SelfcheckFailedEvidence,
    SelfcheckPassedEvidence,
    SlowdownEvidence,
    StragglerEvidence,
    UnreadableEvidence,
    evidence_of,
    read_evidence,
    with_more_evidence,
)
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.prediction import Prediction
from fleetguard.records.runtime import Heartbeat, StepTiming
from fleetguard.selfcheck.command import command_result
from fleetguard.selfcheck.report import CheckResult, CheckState, SelfcheckReport
from fleetguard.shipping.commands import CommandKind, HostCommand
from fleetguard.store import Store
from predictor.calibration import Calibration, CalibrationKind
from predictor.risk_policy import RiskPolicy
from predictor.selection import SelectionRule
from straggler.hang import HangDiagnosis, hang_finding
from straggler.heartbeat import HeartbeatConfig, HeartbeatMonitor
from straggler.scoring import StragglerDetector

JOB = "job-1"


def _beat(mon: HeartbeatMonitor, rank: int, ts: float, step: int, status: str = "running") -> None:
    hb = Heartbeat(ts, "h0", JOB, rank, rank, 4, 1000 + rank, step=step, section=None, status=status)
    mon.observe(hb, ts)


def rank_findings() -> list[Finding]:
    """dead_rank, rank_terminated, rank_error and hung_rank, from the heartbeat monitor."""
    found = []
    for hung in (False, True):
        mon = HeartbeatMonitor(HeartbeatConfig())
        mon.register_job(JOB, world_size=4, started_at=0.0, local_ranks=range(4))
        for step, ts in enumerate(range(2, 11)):
            for rank in range(4):
                _beat(mon, rank, float(ts), step)
        if hung:
            found += mon.check(2000.0)  # every rank silent far past any timeout
            continue
        mon.process_exited(JOB, 0, exit_code=-9, now=10.2)
        mon.process_exited(JOB, 1, exit_code=-15, now=10.2)
        _beat(mon, 2, 10.3, 9, status="error")
        found += mon.check(10.5)
    return found


def step_findings() -> list[Finding]:
    """straggler and job_slowdown, from the step-time detector (as tests/straggler drive it)."""
    found = []
    for slow_rank, job_factor in ((5, 1.0), (None, 1.2)):
        det = StragglerDetector()
        rng = random.Random(3)
        for step in range(300):
            for rank in range(16):
                seconds = 1.0 + rng.uniform(-0.05, 0.05)
                if step >= 150:
                    seconds *= job_factor * (1.3 if rank == slow_rank else 1.0)
                det.observe(StepTiming(float(step), f"h{rank // 8}", JOB, rank, step, "compute", seconds))
            found += det.check(float(step))
    return found


def at_risk() -> list[Finding]:
    policy = RiskPolicy(
        Calibration(CalibrationKind.PLATT, base_rate=0.01),
        SelectionRule(k=2, period_seconds=86400.0, step_seconds=3600.0),
        (),
    )
    p = Prediction(1000.0, "h0", "GPU-a", 0.9, 1, "model-1", 72.0, '[{"feature": "ecc", "value": 3}]')
    return at_risk_findings([p], policy)


def selfchecks() -> list[Finding]:
    failed = SelfcheckReport(
        "h0", [CheckResult("compute", "gpu:0", CheckState.FAILED, "slow", {"tflops": 1.5})], 100.0, 102.0
    )
    passed = SelfcheckReport("h0", [CheckResult("compute", "gpu:0", CheckState.PASSED, "ok")], 200.0, 201.0)
    command = HostCommand("cmd-7", CommandKind.SELFCHECK, None, "after repair")
    _, _, shipped = command_result(failed, command)
    _, _, done = command_result(passed, command)
    return [f for f in [*shipped, *done] if isinstance(f, Finding)]


def controller_findings() -> list[Finding]:
    host = HostState("h9", "boot-1", 0.0, 500.0, 499.0, 42, 10.0, 3, 30, 8, "1.0")
    fault = FleetFault("xid", 79, ("h1", "h2", "h3"), 900.0, 950.0, 4)
    return [host_silent_finding(host, 600.0, 30.0), fleet_fault_finding(fault, 960.0)]


def every_kind() -> list[Finding]:
    diag = HangDiagnosis("gpu_stream_blocked", "world", (3,), {"suspect_hosts": {"3": "h0"}}, True)
    mark = DrainMark("GPU-a", "h0", 1000.0, 5000.0, "at_risk_gpu/GPU-a/1000.000/model-1", 0.9)
    return [
        *rank_findings(),
        *step_findings(),
        hang_finding(diag, JOB, 70.0),
        *at_risk(),
        idle_finding(mark, 1200.0),
        *selfchecks(),
        *controller_findings(),
    ]


@pytest.fixture(scope="module")
def raised() -> list[Finding]:
    return every_kind()


def stored_and_read(tmp_path: Path, findings: list[Finding]) -> list[Finding]:
    with Store.open(tmp_path / "fleet.duckdb") as store:
        store.append(findings)
        return select_records(store.connection, "findings", Finding, "true", [])


def test_the_detectors_raise_every_kind(raised: list[Finding]) -> None:
    assert {f.kind for f in raised} == set(FindingKind)
    assert set(RECORDS) == set(FindingKind)


def test_every_kind_round_trips_the_store_into_a_typed_record(tmp_path: Path, raised: list[Finding]) -> None:
    back = {f.finding_id: f for f in stored_and_read(tmp_path, raised)}
    assert len(back) == len(raised)
    for original in raised:
        read = back[original.finding_id]
        assert read == original
        assert type(read.kind) is FindingKind and type(read.severity) is Severity
        view = evidence_of(read)
        assert isinstance(view, RECORDS[read.kind]), (read.kind, view)
        assert view == evidence_of(original)


def test_the_views_carry_what_the_detectors_wrote(tmp_path: Path, raised: list[Finding]) -> None:
    back = {f.kind: evidence_of(f) for f in stored_and_read(tmp_path, raised)}
    dead, hung = back[FindingKind.DEAD_RANK], back[FindingKind.HUNG_RANK]
    assert dead == RankExitEvidence(exit_code=-9, pid=1000, last_heartbeat_ts=10.0, step=8)
    assert isinstance(hung, HungRankEvidence) and hung.cause == "silent" and hung.waited_seconds is not None
    assert hung.section == "step" and hung.pid in range(1000, 1004) and hung.last_progress_ts == 10.0
    straggler = back[FindingKind.STRAGGLER]
    assert isinstance(straggler, StragglerEvidence)
    assert straggler.slowdown is not None and straggler.slowdown > 1.2 and straggler.episode_id is not None
    slowdown = back[FindingKind.JOB_SLOWDOWN]
    assert isinstance(slowdown, SlowdownEvidence) and slowdown.shift_fraction == pytest.approx(0.2, abs=0.03)
    hang = back[FindingKind.HANG_LOCALISED]
    assert hang == HangEvidence(
        "gpu_stream_blocked", "world", (3,), True, None, MappingProxyType({"suspect_hosts": {"3": "h0"}})
    )
    risk = back[FindingKind.AT_RISK_GPU]
    assert isinstance(risk, AtRiskEvidence)
    assert (risk.risk, risk.base_rate, risk.rank, risk.model_id, risk.horizon_hours) == (
        0.9,
        0.01,
        1,
        "model-1",
        72.0,
    )
    assert risk.drivers == [{"feature": "ecc", "value": 3}]
    idle = back[FindingKind.AT_RISK_GPU_IDLE]
    assert idle == IdleEvidence("at_risk_gpu/GPU-a/1000.000/model-1", 0.9, 1000.0)
    failed = back[FindingKind.SELFCHECK_FAILED]
    assert failed == SelfcheckFailedEvidence("compute", "gpu:0", "cmd-7", MappingProxyType({"tflops": 1.5}))
    passed = back[FindingKind.SELFCHECK_PASSED]
    assert isinstance(passed, SelfcheckPassedEvidence)
    assert (passed.command_id, passed.status, passed.checks) == (
        "cmd-7",
        "healthy",
        ("passed compute gpu:0",),
    )
    silent_after = HostState("h9", "b", 0.0, 500.0, 499.0, 42, 10.0, 3, 30, 8, "1.0").silent_after(30.0)
    assert back[FindingKind.HOST_SILENT] == HostSilentEvidence(500.0, 42, "boot-1", 10.0, silent_after)
    assert back[FindingKind.FLEET_FAULT] == FleetFaultEvidence(
        "xid:79", "xid", 79, ("h1", "h2", "h3"), 3, 900.0, 950.0, 4
    )


def test_ids_follow_the_one_scheme(raised: list[Finding]) -> None:
    for f in raised:
        assert f.finding_id.startswith(f"{f.kind.value}/"), f.finding_id
    assert len({f.finding_id for f in raised}) == len(raised)
    assert finding_id(FindingKind.HOST_SILENT, "h9", 500.0) == "host_silent/h9/500.000"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON list"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        ("x" * (2 << 20), "over"),
    ],
)
def test_garbled_evidence_in_the_store_reads_as_unreadable(tmp_path: Path, text: str, reason: str) -> None:
    garbled = Finding(1.0, "hang_localised/j/1.000", FindingKind.HANG_LOCALISED, Severity.CRITICAL, "s", "x")
    [read] = stored_and_read(tmp_path, [dataclasses.replace(garbled, evidence_json=text)])
    view = evidence_of(read)
    assert isinstance(view, UnreadableEvidence) and view.reason.startswith(reason)
    assert len(view.text) <= 200
    # a stage that adds its say keeps what it could not read, as text
    assert read_evidence(with_more_evidence(text, {"gpu_jobs": []})) == Evidence(
        {"evidence": text[:KEPT_UNREADABLE_CHARS], "gpu_jobs": []}
    )


def test_wrong_types_in_evidence_read_as_not_said() -> None:
    f = Finding(
        1.0,
        "straggler/j/1/2/3",
        FindingKind.STRAGGLER,
        Severity.WARNING,
        "s",
        "x",
        # as a hostile peer might send it
        evidence_json='{"lost_seconds": "lots", "score": true, "slowdown": 1.5, "update": 1}',
    )
    view = evidence_of(f)
    assert isinstance(view, StragglerEvidence) and view.slowdown == 1.5
    assert (view.lost_seconds, view.score, view.update, view.episode_id) == (None, None, None, None)


def test_a_kind_this_version_does_not_know_is_passed_over_not_raised(tmp_path: Path) -> None:
    with Store.open(tmp_path / "fleet.duckdb") as store:
        store.connection.execute(
            "INSERT INTO findings (ts, finding_id, kind, severity, subject, summary) VALUES "
            "(now(), 'a', 'from_the_future', 'warning', 's', 'x'), "
            "(now(), 'b', 'straggler', 'loud', 's', 'x'), (now(), 'c', 'straggler', 'warning', 's', 'x')"
        )
        read = select_records(store.connection, "findings", Finding, "true", [])
    assert [(f.finding_id, f.kind) for f in read] == [("c", FindingKind.STRAGGLER)]
