"""Findings of every kind and every evidence shape, raised by the code that detects them: the samples whose
evidence JSON tests/fixtures/evidence_pinned.json pins (written by the dict-building writers before the
evidence records existed)."""

from __future__ import annotations

from fleetguard.controller.correlation import FleetFault, fleet_fault_finding
from fleetguard.records.findings import Finding
from fleetguard.records.runtime import Heartbeat
from straggler.hang import HangDiagnosis, hang_finding
from straggler.heartbeat import HeartbeatConfig, HeartbeatMonitor
from tests.store.test_finding_records import JOB, every_kind


def _beat(mon: HeartbeatMonitor, rank: int, ts: float, step: int | None, status: str = "running") -> None:
    hb = Heartbeat(ts, "h0", JOB, rank, rank, 2, 2000 + rank, step=step, section=None, status=status)
    mon.observe(hb, ts)


def more_rank_shapes() -> list[Finding]:
    """A rank that never beat, one stuck on its way out, one that died saying why."""
    silent_from_start = HeartbeatMonitor(HeartbeatConfig())
    silent_from_start.register_job(JOB, world_size=2, started_at=0.0, local_ranks=range(2))
    found = silent_from_start.check(5000.0)
    exiting = HeartbeatMonitor(HeartbeatConfig())
    exiting.register_job(JOB, world_size=2, started_at=0.0, local_ranks=range(2))
    for ts in range(1, 6):
        _beat(exiting, 0, float(ts), ts)
        _beat(exiting, 1, float(ts), ts)
    _beat(exiting, 0, 6.0, 5, status="exiting")
    found += exiting.check(6000.0)
    exiting.process_exited(JOB, 1, 1, 6001.0, {"error": "RuntimeError: CUDA error", "group_failures": [0]})
    found += exiting.check(6002.0)
    return found


def more_shapes() -> list[Finding]:
    blocked = {"tp-0": {"kind": "collective_mismatch", "suspects": [1, 2]}}
    diag = HangDiagnosis("collective_mismatch", "tp-0", (1, 2), {"blocked_groups": blocked}, spans_hosts=True)
    fault = FleetFault("nic_down", None, ("h1", "h2"), 10.0, 20.0, 2)
    return [*more_rank_shapes(), hang_finding(diag, JOB, 80.0), fleet_fault_finding(fault, 30.0)]


def samples() -> list[Finding]:
    return [*every_kind(), *more_shapes()]
