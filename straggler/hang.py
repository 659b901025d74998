"""Hang localisation from collective progress: which process group is stuck, why, and which ranks to suspect.

Per group with members R and each rank's (last_enqueued, last_started, last_completed), E = max last_enqueued:
ranks that never enqueued E have a stuck host side (prime suspects); all enqueued but some never started E
have a blocked GPU stream; all started and none completed points at the network; the same sequence number
with a different op or size is a program bug (no hardware eviction). A member with no report is a suspect.
Across groups the earliest-blocked group holds the root cause. Pure function over records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from fleetguard.records.evidence import HangEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.runtime import CollectiveProgress
from straggler.plausibility import COLLECTIVE_LIMITS, implausible_among

HOST_STUCK = "host_stuck"
GPU_STREAM_BLOCKED = "gpu_stream_blocked"
NETWORK = "network"
COLLECTIVE_MISMATCH = "collective_mismatch"
KINDS = (COLLECTIVE_MISMATCH, HOST_STUCK, GPU_STREAM_BLOCKED, NETWORK)


@dataclass(frozen=True, slots=True)
class HangDiagnosis:
    kind: str  # host_stuck | gpu_stream_blocked | network | collective_mismatch (| heartbeat_only, analyzer)
    process_group: str
    suspect_ranks: tuple[int, ...]
    evidence: dict[str, object] = field(default_factory=dict)
    evict_hardware: bool = False  # only a blocked GPU stream points at one rank's hardware
    spans_hosts: bool | None = (
        None  # the job's ranks run on hosts this analyzer does not see (None: not said)
    )


@dataclass(frozen=True, slots=True)
class _Blocked:
    group: str
    kind: str
    suspects: tuple[int, ...]
    enqueued_ranks: frozenset[int]  # ranks that did issue the stuck collective (they wait inside it)
    blocked_since: float  # last time anything in the group moved, from report timestamps
    evidence: dict[str, object]


def localise_hang(
    progress: Sequence[CollectiveProgress], members: Mapping[str, Sequence[int]] | None = None
) -> HangDiagnosis | None:
    """The root-cause group and its suspects, or None when no group is blocked. `members` names each group's
    ranks so a missing report can be seen; without it a group's members are the ranks that reported on it.
    Of several reports for one (group, rank), the latest (by ts) counts; a report whose counters run ahead of
    its group's by orders of magnitude (straggler.plausibility) is left out, so its rank is a missing member
    (a suspect itself) rather than the reason every other rank looks stuck."""
    latest: dict[str, dict[int, CollectiveProgress]] = {}
    for p in progress:
        group = latest.setdefault(p.process_group, {})
        old = group.get(p.rank)
        if old is None or p.ts >= old.ts:
            group[p.rank] = p
    implausible = _drop_implausible(latest)
    names = set(latest) | set(members or {})
    blocked = [
        b
        for name in sorted(names)
        if (b := _classify(name, latest.get(name, {}), (members or {}).get(name))) is not None
    ]
    if not blocked:
        return None
    root = _root_group(blocked)
    evidence = dict(root.evidence)
    hosts = {r: p.host for g in latest.values() for r, p in g.items() if r in root.suspects}
    evidence["suspect_hosts"] = {str(r): hosts[r] for r in sorted(hosts)}
    evidence["blocked_groups"] = {b.group: {"kind": b.kind, "suspects": list(b.suspects)} for b in blocked}
    if implausible:
        evidence["implausible_ranks"] = implausible
    return HangDiagnosis(
        kind=root.kind,
        process_group=root.group,
        suspect_ranks=root.suspects,
        evidence=evidence,
        evict_hardware=root.kind == GPU_STREAM_BLOCKED,
    )


def _drop_implausible(latest: dict[str, dict[int, CollectiveProgress]]) -> dict[str, list[int]]:
    """Remove (in place) each group's reports whose counters are implausibly far ahead; {group: ranks}."""
    dropped: dict[str, list[int]] = {}
    for name, reports in latest.items():
        counters = {r: max(p.last_enqueued, p.last_started, p.last_completed) for r, p in reports.items()}
        ahead = implausible_among(counters, COLLECTIVE_LIMITS)
        if ahead:
            dropped[name] = sorted(ahead)
            for rank in ahead:
                del reports[rank]
    return dropped


def _classify(
    name: str, reports: Mapping[int, CollectiveProgress], members: Sequence[int] | None
) -> _Blocked | None:
    expected = set(members) if members is not None else set(reports)
    missing = sorted(expected - set(reports))
    present = [reports[r] for r in sorted(reports) if r in expected]
    if not present:
        if not missing:
            return None
        return _Blocked(
            name,
            HOST_STUCK,
            tuple(missing),
            frozenset(),
            float("-inf"),
            {"process_group": name, "missing_ranks": missing, "reason": "no member reported"},
        )
    e = max(p.last_enqueued for p in present)
    blocked_since = max(p.ts for p in present)
    base: dict[str, object] = {
        "process_group": name,
        "max_enqueued": e,
        "missing_ranks": missing,
        "progress": {str(p.rank): [p.last_enqueued, p.last_started, p.last_completed] for p in present},
    }
    at_e = [p for p in present if p.last_enqueued == e]
    enqueued = frozenset(p.rank for p in at_e)
    signatures = {(p.op, p.size) for p in at_e if p.op is not None or p.size is not None}
    if len(signatures) > 1:
        return _Blocked(
            name,
            COLLECTIVE_MISMATCH,
            _minority(at_e),
            enqueued,
            blocked_since,
            base | {"signatures": {str(p.rank): [p.op, p.size] for p in at_e}},
        )
    behind = sorted({p.rank for p in present if p.last_enqueued < e} | set(missing))
    if behind:
        return _Blocked(name, HOST_STUCK, tuple(behind), enqueued, blocked_since, base)
    not_started = tuple(p.rank for p in present if p.last_started < e)
    if not_started:
        return _Blocked(name, GPU_STREAM_BLOCKED, not_started, enqueued, blocked_since, base)
    not_completed = tuple(p.rank for p in present if p.last_completed < e)
    if not_completed:
        return _Blocked(name, NETWORK, not_completed, enqueued, blocked_since, base)
    return None


def _minority(at_e: list[CollectiveProgress]) -> tuple[int, ...]:
    """Ranks whose (op, size) differs from the most common one; with no majority, every rank at E."""
    counts: dict[tuple[str | None, int | None], list[int]] = {}
    for p in at_e:
        counts.setdefault((p.op, p.size), []).append(p.rank)
    ordered = sorted(counts.values(), key=len, reverse=True)
    if len(ordered[0]) == len(ordered[1]):
        return tuple(sorted(p.rank for p in at_e))
    return tuple(sorted(r for ranks in ordered[1:] for r in ranks))


def _root_group(blocked: list[_Blocked]) -> _Blocked:
    """A group whose suspects are only behind because they wait inside another blocked group's collective is
    a consequence; of the rest, the one that stopped moving first holds the root cause."""
    waiting_in: dict[int, set[str]] = {}
    for b in blocked:
        for rank in b.enqueued_ranks:
            waiting_in.setdefault(rank, set()).add(b.group)
    causes = [
        b
        for b in blocked
        if not (
            b.kind == HOST_STUCK
            and b.suspects
            and all(waiting_in.get(r, set()) - {b.group} for r in b.suspects)
        )
    ]
    return min(causes or blocked, key=lambda b: (b.blocked_since, b.group))


def hang_finding(diag: HangDiagnosis, job_id: str, now: float) -> Finding:
    """The `hang_localised` finding for a diagnosis: names the suspects and whether to evict hardware."""
    evidence = HangEvidence(
        hang_kind=diag.kind,
        process_group=diag.process_group,
        suspect_ranks=diag.suspect_ranks,
        evict_hardware=diag.evict_hardware,
        spans_hosts=diag.spans_hosts,
        more=MappingProxyType(dict(diag.evidence)),  # the classifier's say, kept whole
    )
    suspects = ", ".join(str(r) for r in diag.suspect_ranks) or "none"
    hosts = diag.evidence.get("suspect_hosts")
    host_names = set(hosts.values()) if isinstance(hosts, dict) else set()
    return Finding(
        ts=now,
        finding_id=finding_id(FindingKind.HANG_LOCALISED, job_id, now),
        kind=FindingKind.HANG_LOCALISED,
        severity=Severity.CRITICAL,
        subject=f"job/{job_id}/group/{diag.process_group}",
        summary=f"job {job_id} hung in group {diag.process_group}: {diag.kind.replace('_', ' ')}; "
        f"suspect ranks {suspects}",
        host=str(next(iter(host_names))) if len(host_names) == 1 else None,  # one host to act on
        job_id=job_id,
        rank=diag.suspect_ranks[0] if len(diag.suspect_ranks) == 1 else None,
        evidence_json=evidence_json(evidence),
    )
