"""GPUs marked to drain once their work ends: what a prediction may do to a GPU, and no more.

A prediction is a guess. An at-risk GPU's job is asked to checkpoint (the runtime does that), and the GPU is
marked; only when nothing runs on it any more (no rank of any job, no other compute process) does the mark
become an `at_risk_gpu_idle` finding, whose policy action is a drain. So no running job is drained because
of a prediction, and the drain reaches the incident engine (and its breaker) only when it actually runs.

A mark lasts the model's horizon: after it, the prediction it came from has expired. Marks are bounded: the
selection rule already allows only K per period fleet-wide, and MAX_MARKS caps what a burst could leave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from diagnosis.gpu_jobs import GpuUsage, usage_of
from fleetguard.records.evidence import IdleEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id

MAX_MARKS = 1024
IDLE_KIND = FindingKind.AT_RISK_GPU_IDLE


@dataclass(frozen=True, slots=True)
class DrainMark:
    gpu_uuid: str
    host: str
    marked_at: float
    expires_at: float
    finding_id: str  # the at-risk finding that marked it
    risk: float


class DrainMarks:
    """Marked GPUs by UUID. Not thread-safe: one scoring loop owns it."""

    def __init__(self, max_marks: int = MAX_MARKS) -> None:
        self.max_marks = max_marks
        self._marks: dict[str, DrainMark] = {}

    def __len__(self) -> int:
        return len(self._marks)

    def mark(self, finding: Finding, risk: float, ttl_seconds: float) -> None:
        """Mark the finding's GPU (a GPU marked again keeps its first mark, with the later expiry)."""
        if finding.gpu_uuid is None:
            return
        old = self._marks.get(finding.gpu_uuid)
        expires = finding.ts + ttl_seconds
        if old is not None:
            self._marks[finding.gpu_uuid] = DrainMark(
                old.gpu_uuid, old.host, old.marked_at, max(old.expires_at, expires), old.finding_id, old.risk
            )
            return
        if len(self._marks) >= self.max_marks:
            # the oldest mark goes: bounded whatever a broken model or a hostile store does
            del self._marks[min(self._marks.values(), key=lambda m: m.marked_at).gpu_uuid]
        self._marks[finding.gpu_uuid] = DrainMark(
            finding.gpu_uuid, finding.host or "", finding.ts, expires, finding.finding_id, risk
        )

    def due(self, usages: Sequence[GpuUsage], now: float) -> list[Finding]:
        """The marked GPUs nothing runs on now, as `at_risk_gpu_idle` findings (their marks removed), and
        expired marks dropped. A GPU the collectors no longer list is left marked: its state is unknown."""
        out = []
        for gpu, mark in list(self._marks.items()):
            if now > mark.expires_at:
                del self._marks[gpu]
                continue
            usage = usage_of(usages, uuid=gpu)
            if usage is None or usage.jobs or usage.other_pids:
                continue
            del self._marks[gpu]
            out.append(idle_finding(mark, now))
        return out


def idle_finding(mark: DrainMark, now: float) -> Finding:
    return Finding(
        ts=now,
        finding_id=finding_id(IDLE_KIND, mark.finding_id),
        kind=IDLE_KIND,
        severity=Severity.WARNING,
        subject=f"{mark.host}/{mark.gpu_uuid}",
        summary=f"GPU {mark.gpu_uuid} on {mark.host}: predicted at risk ({mark.risk:.0%}) and now idle, "
        "so it can be drained without stopping a job",
        host=mark.host or None,
        gpu_uuid=mark.gpu_uuid,
        evidence_json=evidence_json(IdleEvidence(mark.finding_id, mark.risk, mark.marked_at)),
    )
