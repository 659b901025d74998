"""Records of what analysis concluded (findings) and what was done about it (actions), with their vocabulary.

The vocabularies are `StrEnum`s: a member is its text, so the store's VARCHAR columns, the wire formats, JSON
and the API carry the same strings as before, and a plain-string comparison still matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fleetguard.records.action_requests import ActionKind


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class FindingKind(StrEnum):
    """Every kind of finding a module raises, grouped by the module that raises it. `data/policy.toml`'s
    `[findings.<kind>]` tables are keyed by these values."""

    # straggler/heartbeat.py: a rank's liveness
    DEAD_RANK = "dead_rank"
    HUNG_RANK = "hung_rank"
    RANK_ERROR = "rank_error"
    RANK_TERMINATED = "rank_terminated"
    # straggler/scoring.py: step times
    STRAGGLER = "straggler"
    JOB_SLOWDOWN = "job_slowdown"
    # straggler/hang.py: where a hang sits
    HANG_LOCALISED = "hang_localised"
    # fleetguard/predict/live.py and diagnosis/drain_marks.py: the failure predictor
    AT_RISK_GPU = "at_risk_gpu"
    AT_RISK_GPU_IDLE = "at_risk_gpu_idle"
    # fleetguard/selfcheck/: an on-demand self-check of a host
    SELFCHECK_FAILED = "selfcheck_failed"
    SELFCHECK_PASSED = "selfcheck_passed"
    # fleetguard/controller/: what only the controller concludes
    HOST_SILENT = "host_silent"
    FLEET_FAULT = "fleet_fault"


# What only the controller concludes: an agent may not write these (a forged host_silent would hide a real
# silence of another host; a forged fleet_fault would page about the fleet).
CONTROLLER_FINDING_KINDS = frozenset({FindingKind.HOST_SILENT, FindingKind.FLEET_FAULT})


def finding_id(kind: FindingKind, *identity: str | int | float) -> str:
    """The one finding-id scheme: "<kind>/<identity>/...". `identity` is what makes this occurrence one (a job
    and rank and the time it was seen; a GPU, the scoring time and model): the same occurrence, raised again
    after a restart or replayed, gets the same id, so storing it twice is one row's worth of meaning. A float
    is written to the millisecond, so an id never depends on float printing.

    A stage that passes on a finding it did not raise derives from the original id instead: the controller's
    copy of an agent's finding is "fleet:<id>", one per job using an at-risk GPU "<id>/job/<job id>"."""
    parts = [f"{p:.3f}" if isinstance(p, float) else str(p) for p in identity]
    return "/".join([str(kind), *parts])  # str(): a member is its text


# The controller's copy of a finding an agent raised (an agent may not write ids with this prefix).
FLEET_COPY_PREFIX = "fleet:"


class ActionOutcome(StrEnum):
    """How an action ended: the runtime's ledger (`ActionRecord`) and the incident engine's both use it."""

    REQUESTED = "requested"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # nothing is configured to carry it out
    HELD = "held"  # the circuit breaker is open
    DEFERRED = "deferred"  # the repair rate limit was reached


@dataclass(frozen=True, slots=True)
class Finding:
    """A conclusion drawn from signals, e.g. a dead rank, a straggler, an at-risk GPU.

    `evidence_json` holds the samples/events/values that raised it, so they survive a restart or reset.
    """

    ts: float
    finding_id: str
    kind: FindingKind
    severity: Severity
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
    action: ActionKind
    target: str
    finding_id: str | None
    outcome: ActionOutcome  # requested | succeeded | failed | skipped
    detail: str = ""
    # The host whose agent took it; the controller stamps its batch's (token-checked) host when this is None.
    host: str | None = None
