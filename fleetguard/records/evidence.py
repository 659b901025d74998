"""A finding's evidence: one frozen record per finding kind (or family of kinds sharing a shape), written and
read here only, as a JSON object in the `findings.evidence_json` column.

The same class is the writer's record and the reader's view. The module that detects a kind builds its
record in that kind's factory (the function that makes the `Finding`, with `finding_id()`), and
`evidence_json(record)` is the one place it becomes text: keys sorted, each field under its own name (a
tuple as a list, anything JSON cannot hold as its `str`), then `more`, the keys the record does not name (a
rank's exit detail, a hang classifier's say, a later stage's or a newer agent's keys), so the text is what
the writers wrote before the records existed and a store written then reads the same.

Readers call `evidence_of(finding)` (or `read_evidence` for the raw object) and get the kind's record read
back by its class's `read`, or `UnreadableEvidence` for text that is not a JSON object (an old store, a
hostile peer, a truncated row): never an exception, so a daemon loop that reads a garbled row goes on. A
field that is missing or of the wrong type reads as None (or empty), the same as "not said".

Pure: no store import, so the core packages (straggler, diagnosis) use it as they use the records.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, cast

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
        return tuple(v for v in self._items(key) if isinstance(v, int) and not isinstance(v, bool))

    def numbers(self, key: str) -> tuple[float, ...]:
        """The numbers of a list, as they were written (an int stays an int); empty when no list."""
        return tuple(v for v in self._items(key) if isinstance(v, int | float) and not isinstance(v, bool))

    def texts(self, key: str) -> tuple[str, ...]:
        return tuple(v for v in self._items(key) if isinstance(v, str))

    def value(self, key: str) -> object:
        """Any JSON value (None where missing): for a nested part no reader acts on, kept for the record."""
        return self.document.get(key)

    def _items(self, key: str) -> list[object]:
        value = self.document.get(key)
        return value if isinstance(value, list) else []

    def as_dict(self) -> dict[str, object]:
        """A copy, for a JSON answer (the read API)."""
        return dict(self.document)


EMPTY_EVIDENCE = Evidence(MappingProxyType({}))
_NOTHING_MORE: Mapping[str, object] = MappingProxyType({})


def _json_text(values: Mapping[str, object]) -> str:
    # The one encoder: keys sorted (the same evidence is the same text), what JSON cannot hold as its str.
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
    """The column text with `more` added (a later stage's say: the jobs on the GPU, the fleet's decision, the
    command that asked for a self-check): it lands in the record's `more`, or in the field of that name.
    Unreadable evidence is kept as text under "evidence" (its first 64 KiB), for a person to read."""
    evidence = read_evidence(text)
    base: dict[str, object] = (
        evidence.as_dict()
        if isinstance(evidence, Evidence)
        else {"evidence": (text or "")[:KEPT_UNREADABLE_CHARS]}
    )
    return _json_text({**base, **more})


def api_document(text: str | None) -> dict[str, object]:
    """The evidence as the read API answers it: the object, or {"text": ...} where it is unreadable."""
    evidence = read_evidence(text)
    return evidence.as_dict() if isinstance(evidence, Evidence) else {"text": text or ""}


# ---- the records ------------------------------------------------------------------------------------------
# A field's annotation says how it is read back (its text, as `from __future__ import annotations` keeps it);
# `evidence_record` refuses a class with any other, so a new field cannot be written and silently never read.
_READERS: dict[str, Callable[[Evidence, str], object]] = {
    "str | None": Evidence.text,
    "float | None": Evidence.number,
    "int | None": Evidence.integer,
    "bool | None": Evidence.flag,
    "tuple[int, ...]": Evidence.integers,
    "tuple[float, ...]": Evidence.numbers,
    "tuple[str, ...]": Evidence.texts,
    "object": Evidence.value,  # a nested part kept whole (a heat map's medians, the model's drivers)
}
_MORE = "more"  # every record's last field: the keys it does not name, kept so a write of a read is whole
_MORE_TYPE = "Mapping[str, object]"

R = TypeVar("R")


class _Record(Protocol):
    @property
    def more(self) -> Mapping[str, object]: ...


def evidence_record(cls: type[R]) -> type[R]:
    """Checks a record class at import: every field readable by its annotation, `more` last."""
    fields = dataclasses.fields(cast(Any, cls))  # Any: mypy cannot see that R is a dataclass
    if [f.name for f in fields][-1:] != [_MORE]:
        raise TypeError(f"{cls.__name__}: the last field must be `more`")
    for f in fields:  # str(): an annotation's text, whether kept as text or evaluated ("str | None")
        if f.name != _MORE and str(f.type) not in _READERS:
            raise TypeError(f"{cls.__name__}.{f.name}: no reader for {f.type!r}")
        if f.name == _MORE and str(f.type) != _MORE_TYPE:
            raise TypeError(f"{cls.__name__}.more must be {_MORE_TYPE}")
    return cls


def _read(cls: Callable[..., R], e: Evidence) -> R:
    """A record from an evidence object: each field by its reader, the keys no field names into `more`."""
    fields = dataclasses.fields(cast(Any, cls))
    named = {f.name for f in fields}
    values: dict[str, object] = {f.name: _READERS[str(f.type)](e, f.name) for f in fields if f.name != _MORE}
    values[_MORE] = MappingProxyType({k: v for k, v in e.document.items() if k not in named})
    return cls(**values)


def _document(record: _Record, said_when_set: frozenset[str] = frozenset()) -> dict[str, object]:
    """Each field under its name (a field in `said_when_set` only when it is not None), then `more` (which
    wins a clash, as the writers' `{..., **detail}` did)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(cast(Any, record)):
        value = getattr(record, f.name)
        if f.name == _MORE or (value is None and f.name in said_when_set):
            continue
        out[f.name] = value
    return {**out, **record.more}


def _no_more() -> Mapping[str, object]:
    return _NOTHING_MORE


@evidence_record
@dataclass(frozen=True, slots=True)
class RankExitEvidence:
    """`dead_rank`, `rank_terminated` (straggler/heartbeat.py): how the rank's process ended. `more` holds
    what the PID watcher added (the exception it failed with, the other failures of its group)."""

    exit_code: int | None  # None: unknown
    pid: int | None
    last_heartbeat_ts: float | None
    step: int | None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @property
    def error(self) -> str | None:
        """What the rank said it failed with, where it did."""
        value = self.more.get("error")
        return value if isinstance(value, str) else None

    @classmethod
    def read(cls, e: Evidence) -> RankExitEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class HungRankEvidence:
    """`hung_rank` (straggler/heartbeat.py): why the rank is taken for hung and how long it waited.

    A rank that never sent a heartbeat has no position (section, step, pid: not said); one that did has all
    three (a step or pid it did not report written as null); the times it was last heard from and last moved
    are said where known."""

    cause: str | None  # silent | stalled | no_first_heartbeat | stuck_exiting
    waited_seconds: float | None
    timeout_seconds: float | None
    section: str | None = None
    step: int | None = None
    pid: int | None = None
    last_heartbeat_ts: float | None = None
    last_progress_ts: float | None = None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> HungRankEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        position = frozenset() if self.section is not None else frozenset({"section", "step", "pid"})
        return _document(self, said_when_set=position | {"last_heartbeat_ts", "last_progress_ts"})


@evidence_record
@dataclass(frozen=True, slots=True)
class RankErrorEvidence:
    """`rank_error` (straggler/heartbeat.py): the heartbeat that reported the error."""

    status: str | None
    step: int | None
    section: str | None
    pid: int | None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> RankErrorEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class StragglerEvidence:
    """`straggler` (straggler/scoring.py): how slow the rank is against its group, since when, and what it
    has cost the job."""

    group: str | None
    section: str | None
    window_steps: int | None
    evaluations_flagged: int | None
    slow_steps: int | None
    onset_step: int | None
    score: float | None
    z: float | None
    rank_median_seconds: float | None
    group_median_seconds: float | None
    slowdown: float | None  # the rank's median over its group's (None: the group's is 0)
    lost_seconds: float | None
    update: bool | None  # a later report of the same episode
    episode_id: str | None
    per_rank_median_seconds: object  # {rank: median} of the flagged rank and some peers, for a heat map
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> StragglerEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class SlowdownEvidence:
    """`job_slowdown` (straggler/scoring.py): the job's step time moved to a new, slower level."""

    section: str | None
    baseline_seconds: float | None
    recent_seconds: tuple[float, ...]
    shift_fraction: float | None
    window_steps: int | None
    step: int | None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> SlowdownEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class HangEvidence:
    """`hang_localised` (straggler/hang.py): where a hang sits and what to do about the hardware. `more`
    holds the classifier's say (suspect hosts, blocked groups, implausible ranks ...)."""

    hang_kind: str | None  # host_stuck | gpu_stream_blocked | collective_mismatch ...
    process_group: str | None
    suspect_ranks: tuple[int, ...]
    evict_hardware: bool | None
    spans_hosts: bool | None = None  # the fleet controller's say (the job's ranks are on several hosts)
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> HangEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self, said_when_set=frozenset({"spans_hosts"}))


@evidence_record
@dataclass(frozen=True, slots=True)
class AtRiskEvidence:
    """`at_risk_gpu` (fleetguard/predict/live.py): the model's score, the rule that picked the GPU, and
    what raised the score."""

    risk: float | None
    base_rate: float | None
    rank: int | None  # 1 = most at risk in its scoring round
    model_id: str | None
    selection: object  # the selection rule, as its dict
    horizon_hours: float | None
    drivers: object  # the features that raised the score (a JSON list)
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> AtRiskEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class IdleEvidence:
    """`at_risk_gpu_idle` (diagnosis/drain_marks.py): the at-risk finding whose GPU is now idle."""

    at_risk_finding: str | None
    risk: float | None
    marked_at: float | None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> IdleEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class SelfcheckFailedEvidence:
    """`selfcheck_failed` (fleetguard/selfcheck/report.py): which check failed on what; `more` holds the
    check's own measurements."""

    check: str | None
    component: str | None
    command_id: str | None = None  # the controller command that asked for the self-check, where one did
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> SelfcheckFailedEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self, said_when_set=frozenset({"command_id"}))


@evidence_record
@dataclass(frozen=True, slots=True)
class SelfcheckPassedEvidence:
    """`selfcheck_passed` (fleetguard/selfcheck/command.py): the command's report."""

    command_id: str | None
    reason: str | None
    status: str | None
    seconds: float | None
    checks: tuple[str, ...]  # "<state> <check> <component>", at most 64
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> SelfcheckPassedEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class HostSilentEvidence:
    """`host_silent` (fleetguard/controller/analysis.py): when the host was last heard from."""

    last_seen_ts: float | None
    last_seq: int | None
    boot_id: str | None
    interval_seconds: float | None
    silent_after_seconds: float | None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> HostSilentEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


@evidence_record
@dataclass(frozen=True, slots=True)
class FleetFaultEvidence:
    """`fleet_fault` (fleetguard/controller/correlation.py): one fault signature seen on several hosts."""

    signature: str | None
    kind: str | None  # the event kind (xid, ...)
    code: int | None
    hosts: tuple[str, ...]  # the first of them (MAX_HOSTS_IN_EVIDENCE)
    host_count: int | None
    first_ts: float | None
    last_ts: float | None
    occurrences: int | None
    more: Mapping[str, object] = field(default_factory=_no_more)

    @classmethod
    def read(cls, e: Evidence) -> FleetFaultEvidence:
        return _read(cls, e)

    def document(self) -> dict[str, object]:
        return _document(self)


KindEvidence = (
    RankExitEvidence
    | HungRankEvidence
    | RankErrorEvidence
    | StragglerEvidence
    | SlowdownEvidence
    | HangEvidence
    | AtRiskEvidence
    | IdleEvidence
    | SelfcheckFailedEvidence
    | SelfcheckPassedEvidence
    | HostSilentEvidence
    | FleetFaultEvidence
)

# Each kind's record class: the reader picks it by the finding's kind.
RECORDS: Mapping[FindingKind, type[KindEvidence]] = MappingProxyType(
    {
        FindingKind.DEAD_RANK: RankExitEvidence,
        FindingKind.RANK_TERMINATED: RankExitEvidence,
        FindingKind.HUNG_RANK: HungRankEvidence,
        FindingKind.RANK_ERROR: RankErrorEvidence,
        FindingKind.STRAGGLER: StragglerEvidence,
        FindingKind.JOB_SLOWDOWN: SlowdownEvidence,
        FindingKind.HANG_LOCALISED: HangEvidence,
        FindingKind.AT_RISK_GPU: AtRiskEvidence,
        FindingKind.AT_RISK_GPU_IDLE: IdleEvidence,
        FindingKind.SELFCHECK_FAILED: SelfcheckFailedEvidence,
        FindingKind.SELFCHECK_PASSED: SelfcheckPassedEvidence,
        FindingKind.HOST_SILENT: HostSilentEvidence,
        FindingKind.FLEET_FAULT: FleetFaultEvidence,
    }
)


def evidence_json(evidence: KindEvidence) -> str:
    """The column text of a kind's record: the one place evidence becomes JSON."""
    return _json_text(evidence.document())


def evidence_of(finding: Finding) -> KindEvidence | UnreadableEvidence:
    """The finding's evidence as its kind's record, or `UnreadableEvidence` (garbled text, or a kind this
    version has no record for)."""
    evidence = read_evidence(finding.evidence_json)
    if isinstance(evidence, UnreadableEvidence):
        return evidence
    record = RECORDS.get(finding.kind)
    if record is None:
        return UnreadableEvidence(
            f"no evidence record for kind {str(finding.kind)!r}", finding.evidence_json[:200]
        )
    return record.read(evidence)


def hang_evidence(finding: Finding) -> HangEvidence:
    """A hang finding's record; all None where unreadable (the reader treats that as "not said")."""
    return HangEvidence.read(readable(finding.evidence_json))


def straggler_evidence(finding: Finding) -> StragglerEvidence:
    return StragglerEvidence.read(readable(finding.evidence_json))


def hung_rank_evidence(finding: Finding) -> HungRankEvidence:
    return HungRankEvidence.read(readable(finding.evidence_json))


def fleet_fault_evidence(text: str | None) -> FleetFaultEvidence:
    """The record of a stored `fleet_fault` row's evidence column (the controller reads only that column)."""
    return FleetFaultEvidence.read(readable(text))
