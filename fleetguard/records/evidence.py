"""A finding's evidence: written and read here only, as a JSON object in the `findings.evidence_json` column.

Writers hand a mapping to `evidence_json` (keys sorted, values the JSON types; anything else as its text).
Readers call `read_evidence` and get an `Evidence` with typed accessors, or `UnreadableEvidence` for text
that is not a JSON object (an old store, a hostile peer, a truncated row): never an exception, so a daemon
loop that reads a garbled row goes on. Each kind (or family of kinds sharing a shape) has a frozen view with
the fields readers act on or show: `evidence_of(finding)` picks it by kind; a field that is missing or of the
wrong type reads as None (or empty), the same as "not said".

Pure: no store import, so the core packages (straggler, diagnosis) use it as they use the records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fleetguard.records.findings import Finding, FindingKind

# Evidence is a VARCHAR the controller takes at most 64 KiB of; reading more would only cost memory.
MAX_EVIDENCE_CHARS = 1 << 20
# Unreadable evidence a later stage keeps beside its own say: as much as the controller would take.
KEPT_UNREADABLE_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class UnreadableEvidence:
    """Evidence text that is not a JSON object. `text` is kept (cut short) for a person to read."""

    reason: str
    text: str

    def describe(self) -> str:
        return f"unreadable evidence ({self.reason})"


@dataclass(frozen=True, slots=True)
class Evidence(Mapping[str, object]):
    """A readable evidence object. A read-only mapping, with typed accessors that answer None (or empty) for
    a key that is missing or holds another type."""

    document: Mapping[str, object]

    def __getitem__(self, key: str) -> object:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)

    def text(self, key: str) -> str | None:
        value = self.document.get(key)
        return value if isinstance(value, str) else None

    def number(self, key: str) -> float | None:
        value = self.document.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    def integer(self, key: str) -> int | None:
        value = self.document.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def flag(self, key: str) -> bool | None:
        value = self.document.get(key)
        return value if isinstance(value, bool) else None

    def integers(self, key: str) -> tuple[int, ...]:
        """The ints of a list (other items left out); empty when the key holds no list."""
        value = self.document.get(key)
        if not isinstance(value, list):
            return ()
        return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))

    def as_dict(self) -> dict[str, object]:
        """A copy, for a JSON answer (the read API)."""
        return dict(self.document)


EMPTY_EVIDENCE = Evidence(MappingProxyType({}))


def evidence_json(values: Mapping[str, object]) -> str:
    """The column text for `values`: keys sorted (the same evidence is the same text), any value JSON cannot
    hold (a tuple is a list; an enum member is its text) as its `str`."""
    return json.dumps(dict(values), sort_keys=True, default=str)


def read_evidence(text: str | None) -> Evidence | UnreadableEvidence:
    """The evidence in a column's text. None or "" (a row written before evidence existed) is empty."""
    if not text:
        return EMPTY_EVIDENCE
    if len(text) > MAX_EVIDENCE_CHARS:
        return UnreadableEvidence(f"over {MAX_EVIDENCE_CHARS} characters", text[:200])
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        return UnreadableEvidence(f"not JSON: {type(exc).__name__}", text[:200])
    if not isinstance(value, dict):
        return UnreadableEvidence(f"a JSON {type(value).__name__}, not an object", text[:200])
    return Evidence(MappingProxyType(value))


def readable(text: str | None) -> Evidence:
    """The evidence, or empty where it is unreadable: for a reader to whom unreadable means "not said"."""
    evidence = read_evidence(text)
    return evidence if isinstance(evidence, Evidence) else EMPTY_EVIDENCE


def with_more_evidence(text: str | None, more: Mapping[str, object]) -> str:
    """The column text with `more` added (a later stage's say: the jobs on the GPU, the fleet's decision).
    Unreadable evidence is kept as text under "evidence" (its first 64 KiB), for a person to read."""
    evidence = read_evidence(text)
    base: dict[str, object] = (
        evidence.as_dict()
        if isinstance(evidence, Evidence)
        else {"evidence": (text or "")[:KEPT_UNREADABLE_CHARS]}
    )
    return evidence_json({**base, **more})


def api_document(text: str | None) -> dict[str, object]:
    """The evidence as the read API answers it: the object, or {"text": ...} where it is unreadable."""
    evidence = read_evidence(text)
    return evidence.as_dict() if isinstance(evidence, Evidence) else {"text": text or ""}


# One frozen view per finding kind, or per family where kinds share a shape: the fields a reader acts on or
# shows, each None (or empty) where the evidence does not say. The writer is the kind's factory in the module
# that detects it; the JSON it wrote stays whole in the column (and the read API), the view reads from it.


@dataclass(frozen=True, slots=True)
class RankEvidence:
    """`dead_rank`, `hung_rank`, `rank_error`, `rank_terminated` (straggler/heartbeat.py): why."""

    cause: str | None  # hung: silent | stalled | no_first_heartbeat | stuck_exiting
    section: str | None
    step: int | None
    pid: int | None
    exit_code: int | None  # dead or terminated: how the process ended (None: unknown)
    waited_seconds: float | None
    timeout_seconds: float | None
    error: str | None  # what the rank said it failed with, where it did

    @classmethod
    def read(cls, e: Evidence) -> RankEvidence:
        return cls(
            e.text("cause"),
            e.text("section"),
            e.integer("step"),
            e.integer("pid"),
            e.integer("exit_code"),
            e.number("waited_seconds"),
            e.number("timeout_seconds"),
            e.text("error"),
        )


@dataclass(frozen=True, slots=True)
class StragglerEvidence:
    """`straggler` (straggler/scoring.py): how slow the rank is and what it has cost the job."""

    score: float | None
    slowdown: float | None  # the rank's median over its peers'
    lost_seconds: float | None
    onset_step: int | None
    episode_id: str | None

    @classmethod
    def read(cls, e: Evidence) -> StragglerEvidence:
        return cls(
            e.number("score"),
            e.number("slowdown"),
            e.number("lost_seconds"),
            e.integer("onset_step"),
            e.text("episode_id"),
        )


@dataclass(frozen=True, slots=True)
class SlowdownEvidence:
    """`job_slowdown` (straggler/scoring.py): the job's step time moved to a new, slower level."""

    section: str | None
    baseline_seconds: float | None
    shift_fraction: float | None

    @classmethod
    def read(cls, e: Evidence) -> SlowdownEvidence:
        return cls(e.text("section"), e.number("baseline_seconds"), e.number("shift_fraction"))


@dataclass(frozen=True, slots=True)
class HangEvidence:
    """`hang_localised` (straggler/hang.py): where a hang sits and what to do about the hardware."""

    hang_kind: str | None  # host_stuck | gpu_stream_blocked | collective_mismatch ...
    process_group: str | None
    suspect_ranks: tuple[int, ...]
    evict_hardware: bool | None
    spans_hosts: bool | None  # the fleet controller's say (the job's ranks are on several hosts)

    @classmethod
    def read(cls, e: Evidence) -> HangEvidence:
        return cls(
            e.text("hang_kind"),
            e.text("process_group"),
            e.integers("suspect_ranks"),
            e.flag("evict_hardware"),
            e.flag("spans_hosts"),
        )


@dataclass(frozen=True, slots=True)
class AtRiskEvidence:
    """`at_risk_gpu` (fleetguard/predict/live.py): the model's score and what raised it."""

    risk: float | None
    base_rate: float | None
    model_id: str | None
    horizon_hours: float | None

    @classmethod
    def read(cls, e: Evidence) -> AtRiskEvidence:
        return cls(e.number("risk"), e.number("base_rate"), e.text("model_id"), e.number("horizon_hours"))


@dataclass(frozen=True, slots=True)
class IdleEvidence:
    """`at_risk_gpu_idle` (diagnosis/drain_marks.py): the at-risk finding whose GPU is now idle."""

    at_risk_finding: str | None
    risk: float | None
    marked_at: float | None

    @classmethod
    def read(cls, e: Evidence) -> IdleEvidence:
        return cls(e.text("at_risk_finding"), e.number("risk"), e.number("marked_at"))


@dataclass(frozen=True, slots=True)
class SelfcheckEvidence:
    """`selfcheck_failed`, `selfcheck_passed` (fleetguard/selfcheck/): which check, on what, for whom."""

    check: str | None  # failed: the check and the component it failed on
    component: str | None
    command_id: str | None  # the controller command that asked for the self-check, where one did
    status: str | None  # passed: the report's status

    @classmethod
    def read(cls, e: Evidence) -> SelfcheckEvidence:
        return cls(e.text("check"), e.text("component"), e.text("command_id"), e.text("status"))


@dataclass(frozen=True, slots=True)
class HostSilentEvidence:
    """`host_silent` (fleetguard/controller/analysis.py): when the host was last heard from."""

    last_seen_ts: float | None
    last_seq: int | None
    interval_seconds: float | None
    silent_after_seconds: float | None

    @classmethod
    def read(cls, e: Evidence) -> HostSilentEvidence:
        return cls(
            e.number("last_seen_ts"),
            e.integer("last_seq"),
            e.number("interval_seconds"),
            e.number("silent_after_seconds"),
        )


@dataclass(frozen=True, slots=True)
class FleetFaultEvidence:
    """`fleet_fault` (fleetguard/controller/correlation.py): one fault signature seen on several hosts."""

    signature: str | None
    first_ts: float | None
    last_ts: float | None
    host_count: int | None

    @classmethod
    def read(cls, e: Evidence) -> FleetFaultEvidence:
        return cls(e.text("signature"), e.number("first_ts"), e.number("last_ts"), e.integer("host_count"))


KindEvidence = (
    RankEvidence
    | StragglerEvidence
    | SlowdownEvidence
    | HangEvidence
    | AtRiskEvidence
    | IdleEvidence
    | SelfcheckEvidence
    | HostSilentEvidence
    | FleetFaultEvidence
)

_VIEWS: dict[FindingKind, Callable[[Evidence], KindEvidence]] = {
    FindingKind.DEAD_RANK: RankEvidence.read,
    FindingKind.HUNG_RANK: RankEvidence.read,
    FindingKind.RANK_ERROR: RankEvidence.read,
    FindingKind.RANK_TERMINATED: RankEvidence.read,
    FindingKind.STRAGGLER: StragglerEvidence.read,
    FindingKind.JOB_SLOWDOWN: SlowdownEvidence.read,
    FindingKind.HANG_LOCALISED: HangEvidence.read,
    FindingKind.AT_RISK_GPU: AtRiskEvidence.read,
    FindingKind.AT_RISK_GPU_IDLE: IdleEvidence.read,
    FindingKind.SELFCHECK_FAILED: SelfcheckEvidence.read,
    FindingKind.SELFCHECK_PASSED: SelfcheckEvidence.read,
    FindingKind.HOST_SILENT: HostSilentEvidence.read,
    FindingKind.FLEET_FAULT: FleetFaultEvidence.read,
}


def evidence_of(finding: Finding) -> KindEvidence | UnreadableEvidence:
    """The finding's evidence as its kind's view, or `UnreadableEvidence` (garbled text, or a kind this
    version has no view for)."""
    evidence = read_evidence(finding.evidence_json)
    if isinstance(evidence, UnreadableEvidence):
        return evidence
    view = _VIEWS.get(finding.kind)
    if view is None:
        return UnreadableEvidence(
            f"no evidence view for kind {str(finding.kind)!r}", finding.evidence_json[:200]
        )
    return view(evidence)


def hang_evidence(finding: Finding) -> HangEvidence:
    """A hang finding's view; all None where unreadable (the reader treats that as "not said")."""
    return HangEvidence.read(readable(finding.evidence_json))


def straggler_evidence(finding: Finding) -> StragglerEvidence:
    return StragglerEvidence.read(readable(finding.evidence_json))


def rank_evidence(finding: Finding) -> RankEvidence:
    return RankEvidence.read(readable(finding.evidence_json))


def fleet_fault_evidence(text: str | None) -> FleetFaultEvidence:
    """The view of a stored `fleet_fault` row's evidence column (the controller reads only that column)."""
    return FleetFaultEvidence.read(readable(text))
