"""Straggler scoring: which rank is persistently slower than its peers, and when has the whole job slowed.

Per rank, the median of a compute section over its last window of steps; within each peer group a relative
score (fastest median / rank's median, NVIDIA flags below 0.75) and a robust z ((m - median) / 1.4826 MAD).
The window slides: it is scored every quarter window, and a rank is a straggler once it has been slow at every
evaluation across a whole window (the slowness has lasted longer than a window), so one noisy step or a GC
pause flags nothing while a 1.3x rank is named within seconds rather than after three tumbling windows.
Job-wide slowdowns are told apart by the job's own history: a change point on tumbling (non-overlapping)
job-level window medians, confirmed only when their mean moves by >= 10% (Greyhound), blamed on no rank.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fleetguard.records.evidence import SlowdownEvidence, StragglerEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.runtime import StepTiming

PeerGroups = Callable[[int], str] | Mapping[int, str]


@dataclass(frozen=True, slots=True)
class StragglerConfig:
    # Compute sections in priority order: the first one a job reports is scored, the others ignored, so a job
    # that times both "compute" and "step" is not counted twice. Collectives are never scored: fast ranks
    # wait longer inside them and would look slow.
    sections: tuple[str, ...] = ("compute", "step")
    # Window length, turned into steps from the job's step period: the time between a rank's steps over
    # the first steps of the job (the scored section's duration where step times are not known). Short
    # windows with persistence beat one long one: a median over a few seconds of steps ignores any one
    # outlier, and persistence across evaluations ignores any burst shorter than the window.
    window_seconds: float = 3.0
    min_window_steps: int = 4
    max_window_steps: int = 200
    sizing_samples: int = 32
    warmup_steps: int = 3  # first steps of a job (compilation, cache warm-up) are not scored
    # A step this far behind the newest one means the job restarted from a checkpoint: start the job over.
    restart_step_gap: int = 50
    relative_score_threshold: float = 0.75
    z_threshold: float = 4.0
    min_slowdown_fraction: float = 0.15  # a z-flag also needs the rank this much slower than its group
    min_relative_spread: float = 0.01  # floor of the z scale: identical ranks (MAD 0) are not all outliers
    # Sliding evaluation: scored every window/evaluations_per_window steps over the last window. A rank
    # is flagged once it was slow at every evaluation spanning persistence_windows windows; a rank with at
    # least half a window of steps is scored already, so a rank slow from its first step is not held back
    # by the window filling up.
    evaluations_per_window: int = 4
    persistence_windows: float = 1.0
    report_every_windows: int = 12  # while flagged, re-report so lost_seconds reaches the action policy
    # The time a restart costs (runtime.restart_cost_seconds): a flagged rank is also reported in the window
    # its lost_seconds first passes it, so the policy acts then rather than at the next periodic report.
    action_cost_seconds: float | None = None
    change_min_shift_fraction: float = 0.10
    change_persistence_windows: int = 3  # tumbling job-level windows on one side of the baseline
    baseline_windows: int = 12
    min_baseline_windows: int = 3
    peer_group: PeerGroups | None = None  # rank -> group (same pipeline stage); default one group

    def __post_init__(self) -> None:
        if not self.sections:
            raise ValueError("sections must name at least one compute section")
        if self.window_seconds <= 0 or not 1 <= self.min_window_steps <= self.max_window_steps:
            raise ValueError("window must be positive and min_window_steps <= max_window_steps")
        if not 0 < self.relative_score_threshold < 1:
            raise ValueError("relative_score_threshold must be in (0, 1)")
        if self.persistence_windows < 0 or self.report_every_windows < 1 or self.evaluations_per_window < 1:
            raise ValueError(
                "persistence_windows must be >= 0, report_every_windows and evaluations_per_window >= 1"
            )
        if self.change_persistence_windows < 1:
            raise ValueError("change_persistence_windows must be >= 1")

    def stride(self, window_steps: int) -> int:
        """Steps between two evaluations of a job's sliding window."""
        return max(1, window_steps // self.evaluations_per_window)

    def persistence_steps(self, window_steps: int) -> int:
        """Steps a rank must stay slow at every evaluation after its first slow one to be a straggler.
        Counted in steps, not evaluations: evaluations come with the analyzer's ticks, which may be sparser
        than the stride."""
        return math.ceil(self.persistence_windows * window_steps - 1e-9)

    def group_of(self, rank: int) -> str:
        pg = self.peer_group
        if pg is None:
            return "all"
        if callable(pg):
            return pg(rank)
        return pg.get(rank, "all")


class _Rank:
    __slots__ = (
        "durations",
        "first_slow_step",
        "group",
        "host",
        "last_step",
        "lost_seconds",
        "onset_step",
        "ordered",
        "rank",
        "reported_step",
        "streak",
    )

    def __init__(self, rank: int, window_steps: int, group: str) -> None:
        self.rank = rank
        self.durations: deque[float] = deque(maxlen=window_steps)  # arrival order, to know what leaves
        self.ordered: list[float] = []  # the same values kept sorted, so the median is one index
        self.group = group
        self.host: str | None = None
        self.last_step = -1
        self.streak = 0
        self.lost_seconds = 0.0
        self.onset_step = -1
        self.first_slow_step = -1  # the newest step of the job at the rank's first slow evaluation
        self.reported_step = -1  # the newest step of the job when the rank was last reported


class _Job:
    __slots__ = (
        "first_step",
        "last_eval_step",
        "last_level_step",
        "levels",
        "max_step",
        "ranks",
        "section_priority",
        "sizing",
        "spans",
        "streaking",
        "window_steps",
    )

    def __init__(self, section_priority: int, first_step: int, baseline: int) -> None:
        self.section_priority = section_priority
        self.first_step = first_step
        self.sizing: list[float] = []
        # rank -> (first step, its ts, last step, its ts) seen while sizing: a step's period includes the
        # collectives and the waiting that a compute section's duration leaves out
        self.spans: dict[int, tuple[int, float, int, float]] = {}
        self.window_steps: int | None = None
        self.ranks: dict[int, _Rank] = {}
        self.max_step = first_step
        self.last_eval_step = first_step
        self.last_level_step = first_step
        self.levels: deque[float] = deque(maxlen=baseline)
        self.streaking: set[int] = set()  # ranks with at least one slow window in a row


@dataclass(frozen=True, slots=True)
class _Scored:
    rank: int
    median_seconds: float
    score: float
    z: float


class StragglerDetector:
    """Feed StepTimings; `check(now)` scores every job whose next window of steps is complete."""

    def __init__(self, config: StragglerConfig | None = None) -> None:
        self.config = config or StragglerConfig()
        self._jobs: dict[str, _Job] = {}
        self._priority = {name: i for i, name in enumerate(self.config.sections)}
        self.skipped_records = 0
        self.windows_evaluated = 0

    def forget_job(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def window_steps(self, job_id: str) -> int | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.window_steps

    def observe(self, t: StepTiming) -> None:
        priority = self._priority.get(t.section)
        if priority is None:
            return  # a collective or an unscored section
        d = t.duration_seconds
        if not (d >= 0.0 and math.isfinite(d)) or t.rank < 0:
            self.skipped_records += 1
            return
        job = self._jobs.get(t.job_id)
        if (
            job is None
            or priority < job.section_priority
            or t.step < job.max_step - self.config.restart_step_gap
        ):
            # first sight of the job, a better section than the one scored so far, or a restart: start over
            job = self._jobs[t.job_id] = _Job(priority, t.step, self.config.baseline_windows)
        elif priority > job.section_priority:
            return
        if t.step < job.first_step + self.config.warmup_steps:
            return
        if job.window_steps is None:
            job.sizing.append(d)
            _note_span(job.spans, t)
            if len(job.sizing) >= self.config.sizing_samples:
                self._size_window(job)
            return
        r = job.ranks.get(t.rank)
        if r is None:
            r = job.ranks[t.rank] = _Rank(t.rank, job.window_steps, self.config.group_of(t.rank))
        window = r.durations
        if len(window) == window.maxlen:
            del r.ordered[bisect_left(r.ordered, window[0])]
        window.append(d)
        insort(r.ordered, d)
        r.host = t.host
        if t.step > r.last_step:
            r.last_step = t.step
        if t.step > job.max_step:
            job.max_step = t.step

    def _size_window(self, job: _Job) -> None:
        c = self.config
        periods = sorted(
            (t1 - t0) / (s1 - s0) for s0, t0, s1, t1 in job.spans.values() if s1 > s0 and t1 >= t0
        )
        median_step = _median(periods) if periods else _median(sorted(job.sizing))
        steps = c.max_window_steps if median_step <= 0 else math.ceil(c.window_seconds / median_step - 1e-9)
        job.window_steps = max(c.min_window_steps, min(c.max_window_steps, steps))
        job.last_eval_step = job.max_step
        job.last_level_step = job.max_step
        job.sizing = []
        job.spans = {}

    def check(self, now: float) -> list[Finding]:
        out: list[Finding] = []
        for job_id, job in self._jobs.items():
            w = job.window_steps
            if w is not None and job.max_step - job.last_eval_step >= self.config.stride(w):
                out.extend(self._evaluate(job_id, job, now))
        return out

    # ---- one window ------------------------------------------------------------------------------------

    def _evaluate(self, job_id: str, job: _Job, now: float) -> list[Finding]:
        """Score the sliding window. Kept to O(ranks) cheap Python: a median of a few values per rank, two
        sorts per group, one threshold comparison per rank; only slow ranks get findings work."""
        c = self.config
        w = job.window_steps
        assert w is not None
        since = job.last_eval_step
        job.last_eval_step = job.max_step
        self.windows_evaluated += 1
        # silent for half a window (hung, dead, restarted): no opinion, and its streak ends below. Not "since
        # the last evaluation": a slow rank in a synchronous job is always a step behind the fastest one.
        # Medians are read from the incrementally sorted windows: the tick allocates a few lists, not one
        # per rank, which also keeps Python's cyclic GC from running inside it.
        least = max(c.min_window_steps, (w + 1) // 2)
        recent = job.max_step - max(1, w // 2)
        active = [r for r in job.ranks.values() if r.last_step > recent and len(r.ordered) >= least]
        ranks = [r.rank for r in active]
        medians = [_median(r.ordered) for r in active]
        groups: dict[str, tuple[list[int], list[float]]] = {}
        if c.peer_group is None:
            if ranks:
                groups["all"] = (ranks, medians)
        else:
            for r, m in zip(active, medians, strict=True):
                g = groups.get(r.group)
                if g is None:
                    g = groups[r.group] = ([], [])
                g[0].append(r.rank)
                g[1].append(m)
        out: list[Finding] = []
        slow_now: set[int] = set()
        all_sorted: list[float] = []
        for group, (g_ranks, g_medians) in groups.items():
            center, ordered, slow = _judge_group(g_ranks, g_medians, c)
            all_sorted = ordered if len(groups) == 1 else [*all_sorted, *ordered]
            for s in slow:
                slow_now.add(s.rank)
                out.extend(
                    self._update_rank(
                        job_id, job, group, s, g_ranks, g_medians, center, job.max_step - since, now
                    )
                )
        for rank in job.streaking - slow_now:
            r = job.ranks[rank]
            r.streak, r.lost_seconds, r.reported_step = 0, 0.0, -1
        job.streaking = slow_now
        # the job-level change point reads tumbling windows: overlapping ones would repeat one burst
        if all_sorted and job.max_step - job.last_level_step >= w:
            job.last_level_step = job.max_step
            if len(groups) > 1:
                all_sorted.sort()
            slowdown = self._track_level(job_id, job, _median(all_sorted), now)
            if slowdown is not None:
                out.append(slowdown)
        return out

    def _update_rank(
        self,
        job_id: str,
        job: _Job,
        group: str,
        s: _Scored,
        ranks: list[int],
        medians: list[float],
        center: float,
        steps: int,
        now: float,
    ) -> list[Finding]:
        c = self.config
        r = job.ranks[s.rank]
        w = job.window_steps
        assert w is not None
        if r.streak == 0:
            # the window that first reads slow holds about half a window of slow steps
            r.onset_step = max(job.first_step, job.max_step - w // 2)
            r.first_slow_step = job.max_step
            steps = job.max_step - r.onset_step
        r.streak += 1
        lost_before = r.lost_seconds
        # the slow steps since the last evaluation (since the onset at first), each this much slower than the
        # group's median
        r.lost_seconds += steps * max(0.0, s.median_seconds - center)
        if r.streak < 2 or job.max_step - r.first_slow_step < c.persistence_steps(w):
            return []
        cost = c.action_cost_seconds
        crossed = cost is not None and lost_before <= cost < r.lost_seconds
        first = r.reported_step < 0
        if not first and job.max_step - r.reported_step < c.report_every_windows * w and not crossed:
            return []
        r.reported_step = job.max_step
        evidence = StragglerEvidence(
            group=group,
            section=c.sections[job.section_priority],
            window_steps=job.window_steps,
            evaluations_flagged=r.streak,
            slow_steps=job.max_step - r.onset_step,
            onset_step=r.onset_step,
            score=round(s.score, 4),
            z=round(s.z, 2),
            rank_median_seconds=s.median_seconds,
            group_median_seconds=center,
            slowdown=round(s.median_seconds / center, 4) if center > 0 else None,
            lost_seconds=round(r.lost_seconds, 3),
            update=not first,
            episode_id=f"straggler/{job_id}/{s.rank}/{r.onset_step}",
            per_rank_median_seconds=_medians_evidence(ranks, medians, s),
        )
        summary = (
            f"rank {s.rank} of job {job_id} is {s.median_seconds / center:.2f}x its peers' "
            f"median for {job.max_step - r.onset_step} steps; job lost ~{r.lost_seconds:.1f} s so far"
            if center > 0
            else f"rank {s.rank} of job {job_id} is slower than its peers"
        )
        return [straggler_finding(job_id, s.rank, r.host, (r.onset_step, r.streak), summary, evidence, now)]

    def _track_level(self, job_id: str, job: _Job, level: float, now: float) -> Finding | None:
        """Change point on the job-level step time: the last `change_persistence_windows` windows all sit
        on one side of the baseline mean, and their mean is >= 10% away from it. Confirmed shifts
        re-baseline."""
        c = self.config
        job.levels.append(level)
        p = c.change_persistence_windows
        if len(job.levels) < c.min_baseline_windows + p:
            return None
        values = list(job.levels)
        baseline, recent = values[:-p], values[-p:]
        base = sum(baseline) / len(baseline)
        if base <= 0:
            return None
        shift = sum(recent) / p / base - 1.0
        half = c.change_min_shift_fraction / 2
        same_side = all(v >= base * (1 + half) for v in recent) or all(v <= base * (1 - half) for v in recent)
        if abs(shift) < c.change_min_shift_fraction or not same_side:
            return None
        job.levels.clear()
        job.levels.extend(recent)  # the new level is the baseline from now on: one finding per change
        if shift < 0:
            return None  # faster is not a fault
        evidence = SlowdownEvidence(
            section=c.sections[job.section_priority],
            baseline_seconds=base,
            recent_seconds=tuple(round(v, 6) for v in recent),
            shift_fraction=round(shift, 4),
            window_steps=job.window_steps,
            step=job.max_step,
        )
        return slowdown_finding(job_id, job.max_step, shift, evidence, now)


def straggler_finding(
    job_id: str,
    rank: int,
    host: str | None,
    report: tuple[int, int],
    summary: str,
    evidence: StragglerEvidence,
    now: float,
) -> Finding:
    """The `straggler` factory: one id per report of an episode, `report` (its onset step, how many
    evaluations flagged it so far)."""
    return Finding(
        ts=now,
        finding_id=finding_id(FindingKind.STRAGGLER, job_id, rank, *report),
        kind=FindingKind.STRAGGLER,
        severity=Severity.WARNING,
        subject=f"job/{job_id}/rank/{rank}",
        summary=summary,
        host=host,
        job_id=job_id,
        rank=rank,
        evidence_json=evidence_json(evidence),
    )


def slowdown_finding(job_id: str, step: int, shift: float, evidence: SlowdownEvidence, now: float) -> Finding:
    """The `job_slowdown` factory: one id per job and the step the new level was confirmed at."""
    return Finding(
        ts=now,
        finding_id=finding_id(FindingKind.JOB_SLOWDOWN, job_id, step),
        kind=FindingKind.JOB_SLOWDOWN,
        severity=Severity.WARNING,
        subject=f"job/{job_id}",
        summary=f"job {job_id} slowed by {shift:.0%} on all ranks (not one straggler)",
        job_id=job_id,
        evidence_json=evidence_json(evidence),
    )


def _judge_group(
    ranks: list[int], medians: list[float], c: StragglerConfig
) -> tuple[float, list[float], list[_Scored]]:
    """The group's median, its sorted medians, and the slow members with score and z; a group of one has no
    peers to judge by. Both tests (score < threshold; z and relative slowdown over theirs) reduce to limits
    on the median, so the per-rank work is two comparisons."""
    ordered = sorted(medians)
    center = _median(ordered)
    if len(ranks) < 2:
        return center, ordered, []
    deviations = sorted(abs(m - center) for m in medians)
    scale = max(1.4826 * _median(deviations), c.min_relative_spread * center, 1e-12)
    fastest = ordered[0]
    by_score = fastest / c.relative_score_threshold  # score = fastest / m < threshold  <=>  m > this
    by_z = max(center + c.z_threshold * scale, center * (1.0 + c.min_slowdown_fraction))
    slow = [
        _Scored(rank, m, fastest / m, (m - center) / scale)
        for rank, m in zip(ranks, medians, strict=True)
        if m > by_score or m >= by_z
    ]
    return center, ordered, slow


def _note_span(spans: dict[int, tuple[int, float, int, float]], t: StepTiming) -> None:
    seen = spans.get(t.rank)
    if seen is None:
        spans[t.rank] = (t.step, t.ts, t.step, t.ts)
    elif t.step > seen[2] and math.isfinite(t.ts):
        spans[t.rank] = (seen[0], seen[1], t.step, t.ts)


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid - 1] + sorted_values[mid])


def _medians_evidence(
    ranks: list[int], medians: list[float], s: _Scored, limit: int = 64
) -> dict[str, float]:
    """The flagged rank and up to `limit` peers: enough to draw a heat map without storing 16k values."""
    chosen = {str(r): round(m, 6) for r, m in zip(ranks[:limit], medians[:limit], strict=True)}
    chosen[str(s.rank)] = round(s.median_seconds, 6)
    return chosen
