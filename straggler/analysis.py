"""One analysis loop over a training job's runtime records: heartbeats, stragglers and hang localisation.

The runtime feeds every Heartbeat, StepTiming and CollectiveProgress it receives, reports PID exits, and
calls `tick(now)` once a second; each tick returns only new findings. When a rank is found hung, the latest
collective progress of its job is localised once per hang episode into a `hang_localised` finding.
Clock-free: time only comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from fleetguard.records.evidence import hung_rank_evidence
from fleetguard.records.findings import Finding, FindingKind
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from straggler.hang import COLLECTIVE_MISMATCH, HOST_STUCK, HangDiagnosis, hang_finding, localise_hang
from straggler.heartbeat import DEFAULT_SECTION, HeartbeatConfig, HeartbeatMonitor
from straggler.plausibility import COLLECTIVE_LIMITS, STEP_LIMITS, ahead_of_time
from straggler.positions import AHEAD, RankPosition, position_outliers
from straggler.scoring import StragglerConfig, StragglerDetector

RuntimeRecord = Heartbeat | StepTiming | CollectiveProgress

# Names PyTorch and our client give the default (world) process group; its members are all ranks.
WORLD_GROUP_NAMES = frozenset({"0", "default_pg", "world"})
HEARTBEAT_ONLY = "heartbeat_only"
# Process groups kept per job: names come from the ranks; a job with more is a job sending junk, and its
# further groups are skipped (counted) rather than growing the table.
MAX_GROUPS_PER_JOB = 64
# Timed sections remembered per rank for its current step (names come from the ranks).
MAX_SECTIONS_PER_STEP = 32


class RuntimeAnalyzer:
    def __init__(
        self,
        heartbeat_config: HeartbeatConfig | None = None,
        straggler_config: StragglerConfig | None = None,
    ) -> None:
        self.heartbeats = HeartbeatMonitor(heartbeat_config)
        self.stragglers = StragglerDetector(straggler_config)
        self._progress: dict[str, dict[tuple[str, int], CollectiveProgress]] = {}
        self._groups: dict[str, dict[str, tuple[int, ...]]] = {}
        # Ranks that report to this agent (or are expected to): a multi-node job's other hosts report to
        # their own agents, so they are not missing members of the world group here.
        self._local_ranks: dict[str, set[int]] = {}
        self._world_sizes: dict[str, int] = {}
        self._hang_open: set[str] = set()
        self._group_names: dict[str, set[str]] = {}  # job -> process groups it reported progress on
        # job -> rank -> (step, timed sections finished in it): where a rank stands within its step
        self._sections_done: dict[str, dict[int, tuple[int, frozenset[str]]]] = {}
        # job -> rank -> (pid, step, ts) of its last heartbeat with a step: a step may not run ahead of time
        self._steps: dict[str, dict[int, tuple[int, int, float]]] = {}
        self.skipped_records = 0
        self.implausible_records = 0  # counters that ran ahead of time (straggler.plausibility): left out

    def register_job(
        self,
        job_id: str,
        world_size: int,
        started_at: float,
        process_groups: Mapping[str, Sequence[int]] | None = None,
        local_ranks: Iterable[int] = (),
    ) -> None:
        """Start watching a job, or re-arm it after a restart (progress of the old incarnation is dropped).
        `process_groups` names each group's ranks, so a rank that never reports is seen as missing;
        `local_ranks` are the ranks expected on this host (the world group as this agent sees it)."""
        local = tuple(local_ranks)
        self.heartbeats.register_job(job_id, world_size, started_at, local)
        self.stragglers.forget_job(job_id)  # resumed steps repeat old step numbers; the slow host may be gone
        self._local_ranks[job_id] = set(local)
        self._world_sizes[job_id] = world_size
        self._groups[job_id] = {k: tuple(v) for k, v in (process_groups or {}).items()}
        self._progress.pop(job_id, None)
        self._group_names.pop(job_id, None)
        self._sections_done.pop(job_id, None)
        self._steps.pop(job_id, None)
        self._hang_open.discard(job_id)

    def forget_job(self, job_id: str) -> None:
        self.heartbeats.forget_job(job_id)
        self.stragglers.forget_job(job_id)
        self._progress.pop(job_id, None)
        self._groups.pop(job_id, None)
        self._local_ranks.pop(job_id, None)
        self._world_sizes.pop(job_id, None)
        self._group_names.pop(job_id, None)
        self._sections_done.pop(job_id, None)
        self._steps.pop(job_id, None)
        self._hang_open.discard(job_id)

    def observe(self, record: RuntimeRecord, now: float | None = None) -> None:
        """Take one record; `now` (receive time) defaults to the record's own timestamp."""
        if isinstance(record, Heartbeat):
            if not self._plausible_step(record):
                self.implausible_records += 1
                return
            self.heartbeats.observe(record, record.ts if now is None else now)
            self._local_ranks.setdefault(record.job_id, set()).add(record.rank)
            self._world_sizes[record.job_id] = max(self._world_sizes.get(record.job_id, 1), record.world_size)
        elif isinstance(record, StepTiming):
            self.stragglers.observe(record)
            self._observe_section(record)
        elif isinstance(record, CollectiveProgress):
            self._observe_progress(record)
        else:
            self.skipped_records += 1

    def _observe_section(self, record: StepTiming) -> None:
        ranks = self._sections_done.setdefault(record.job_id, {})
        step, done = ranks.get(record.rank, (record.step, frozenset()))
        if record.step > step:
            step, done = record.step, frozenset()
        if record.step == step and len(done) < MAX_SECTIONS_PER_STEP:
            ranks[record.rank] = (step, done | {record.section})

    def _observe_progress(self, record: CollectiveProgress) -> None:
        groups = self._group_names.setdefault(record.job_id, set())
        if record.process_group not in groups:
            if len(groups) >= MAX_GROUPS_PER_JOB:
                self.skipped_records += 1
                return
            groups.add(record.process_group)
        key = (record.process_group, record.rank)
        job = self._progress.setdefault(record.job_id, {})
        old = job.get(key)
        if old is not None and ahead_of_time(
            old.last_enqueued, old.ts, record.last_enqueued, record.ts, COLLECTIVE_LIMITS
        ):
            self.implausible_records += 1
            return
        if old is None or record.ts >= old.ts:
            job[key] = record

    def _plausible_step(self, hb: Heartbeat) -> bool:
        """False for a step that ran ahead of time since this process's previous heartbeat (a new process,
        a restarted rank resuming from a checkpoint, starts afresh)."""
        if hb.step is None:
            return True
        steps = self._steps.setdefault(hb.job_id, {})
        previous = steps.get(hb.rank)
        if previous is not None and previous[0] == hb.pid:
            _, step, ts = previous
            if ahead_of_time(step, ts, hb.step, hb.ts, STEP_LIMITS):
                return False
        steps[hb.rank] = (hb.pid, hb.step, hb.ts)
        return True

    def process_exited(
        self,
        job_id: str,
        rank: int,
        exit_code: int | None,
        now: float,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        self.heartbeats.process_exited(job_id, rank, exit_code, now, detail)

    def tick(self, now: float) -> list[Finding]:
        findings = self.heartbeats.check(now)
        hung_jobs: dict[str, list[Finding]] = {}
        for f in findings:
            if f.kind == FindingKind.HUNG_RANK and f.job_id is not None:
                hung_jobs.setdefault(f.job_id, []).append(f)
        for job_id in list(self._hang_open):
            if not self.heartbeats.hung_ranks(job_id):
                self._hang_open.discard(job_id)  # the episode is over; a new hang is localised afresh
        for job_id, hung in hung_jobs.items():
            if job_id not in self._hang_open:
                self._hang_open.add(job_id)
                diag = self.localise(job_id, hung)
                diag = replace(diag, spans_hosts=self.spans_hosts(job_id))
                findings.append(hang_finding(diag, job_id, now))
        findings.extend(self.stragglers.check(now))
        return findings

    def spans_hosts(self, job_id: str) -> bool:
        """Some of the job's ranks run where this analyzer does not see them (a multi-node job watched by one
        host's agent): a hang's culprit may be elsewhere, and whoever sees the whole job should act on it."""
        return self._world_sizes.get(job_id, 1) > len(self._local_ranks.get(job_id, ()))

    def localise(self, job_id: str, hung: Sequence[Finding] = ()) -> HangDiagnosis:
        """Localise a job's hang from its latest progress. A rank whose process cannot even send heartbeats
        is the host side stuck, whatever its stale progress says (frozen inside a collective it looks like a
        network hang), unless progress shows mismatched collectives; with no progress at all the heartbeat
        verdict is all there is."""
        silent = sorted(
            {f.rank for f in hung if f.rank is not None and _cause(f) in ("silent", "no_first_heartbeat")}
        )
        hung_ranks = sorted({f.rank for f in hung if f.rank is not None})
        # Where each rank runs, from its heartbeats and hung findings: a suspect that never reported on the
        # stuck group (the usual host-stuck rank) has no progress report to say where it is.
        known = {**self.heartbeats.hosts(job_id)}
        known |= {f.rank: f.host for f in hung if f.rank is not None and f.host is not None}
        diag = localise_hang(list(self._progress.get(job_id, {}).values()), self._members(job_id))
        if diag is not None and (
            not silent or set(diag.suspect_ranks) <= set(silent) or diag.kind == COLLECTIVE_MISMATCH
        ):
            named = diag.evidence.get("suspect_hosts")
            hosts = {int(r): str(h) for r, h in named.items()} if isinstance(named, dict) else {}
            hosts |= {r: known[r] for r in diag.suspect_ranks if r not in hosts and r in known}
            return HangDiagnosis(
                diag.kind,
                diag.process_group,
                diag.suspect_ranks,
                {
                    **diag.evidence,
                    "suspect_hosts": {str(r): hosts[r] for r in sorted(hosts)},
                    "heartbeat_hung_ranks": hung_ranks,
                },
                diag.evict_hardware,
            )
        evidence: dict[str, object] = {"heartbeat_hung_ranks": hung_ranks, "heartbeat_silent_ranks": silent}
        if diag is not None:
            evidence["progress_diagnosis"] = {"kind": diag.kind, "suspect_ranks": list(diag.suspect_ranks)}
        sections = self.heartbeats.sections(job_id)
        # Positions first: a rank still stepping past its stopped peers is not "inside a section of its own"
        # because it happens to be in one when sampled.
        verdict = None if silent or diag is not None else position_outliers(self.positions(job_id))
        odd = [] if silent or diag is not None or verdict is not None else section_outliers(sections)
        if odd:
            # no collective progress to go by, but one rank is inside a section of its own (compute) while
            # the rest wait at the step's collective: the odd one holds the others up
            evidence["sections"] = {str(r): sections[r] for r in sorted(sections)}
            evidence["localised_by"] = "sections"
        if verdict is not None:
            evidence["localised_by"] = "positions"
            evidence["positions"] = verdict.positions
            evidence["reasoning"] = verdict.reasoning
        placed = list(verdict.suspects) if verdict is not None else []
        suspects = silent or odd or placed or hung_ranks
        hosts = {r: known[r] for r in suspects if r in known}
        evidence["suspect_hosts"] = {str(r): hosts[r] for r in sorted(hosts)}
        if verdict is not None and verdict.direction == AHEAD:
            kind = COLLECTIVE_MISMATCH  # a program that skipped a collective: no hardware to evict
        else:
            kind = HOST_STUCK if silent or odd or verdict is not None else HEARTBEAT_ONLY
        return HangDiagnosis(kind, "heartbeat", tuple(suspects), evidence, False)

    def positions(self, job_id: str) -> dict[int, RankPosition]:
        """Where each live rank of a job stands: its step, the timed sections it finished in it, hung."""
        done = self._sections_done.get(job_id, {})
        out = {}
        for rank, (step, moved, hung) in self.heartbeats.steps(job_id).items():
            section_step, sections = done.get(rank, (step, frozenset()))
            out[rank] = RankPosition(step, sections if section_step == step else frozenset(), moved, hung)
        return out

    def _members(self, job_id: str) -> dict[str, tuple[int, ...]]:
        members = dict(self._groups.get(job_id, {}))
        local = self._local_ranks.get(job_id)
        if local:
            for group, _ in self._progress.get(job_id, {}):
                if group in WORLD_GROUP_NAMES and group not in members:
                    members[group] = tuple(sorted(local))
        return members


def section_outliers(sections: Mapping[int, str]) -> list[int]:
    """The ranks a hang's sections single out: the fewest ranks sharing one section other than the default
    ("step", where ranks wait at the step's collectives), when that group is smaller than every other."""
    by_section: dict[str, list[int]] = {}
    for rank, section in sections.items():
        by_section.setdefault(section, []).append(rank)
    if len(by_section) < 2:
        return []
    ordered = sorted(by_section.items(), key=lambda item: len(item[1]))
    (section, ranks), runner_up = ordered[0], ordered[1]
    if section == DEFAULT_SECTION or len(ranks) >= len(runner_up[1]):
        return []
    return sorted(ranks)


def _cause(f: Finding) -> str | None:
    return hung_rank_evidence(f).cause
