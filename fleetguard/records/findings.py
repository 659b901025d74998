"""Records of what analysis concluded (findings) and what was done about it (actions)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    """A conclusion drawn from signals, e.g. a dead rank, a straggler, an at-risk GPU.

    `evidence_json` holds the samples/events/values that raised it, so they survive a restart or reset.
    """

    ts: float
    finding_id: str
    kind: str  # dead_rank | hung_rank | straggler | job_slowdown | hang_localised | at_risk_gpu ...
    severity: str  # info | warning | critical
    subject: str  # what it is about: "job/rank 3", "host/gpu-uuid" ...
    summary: str
    host: str | None = None
    job_id: str | None = None
    rank: int | None = None
    gpu_uuid: str | None = None
    evidence_json: str = "{}"


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """An action taken (or refused) because of a finding, with its outcome."""

    ts: float
    action_id: str
    action: str  # checkpoint | restart | cordon | stop_crash_loop | none
    target: str
    finding_id: str | None
    outcome: str  # requested | succeeded | failed | skipped
    detail: str = ""
    # The host whose agent took it; the controller stamps its batch's (token-checked) host when this is None.
    host: str | None = None
