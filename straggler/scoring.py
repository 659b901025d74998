"""Straggler scoring: which rank is persistently slower than its peers, and when has the whole job slowed.

Per rank, the median of a compute section over a window of steps; within each peer group a relative score
(fastest median / rank's median, NVIDIA flags below 0.75) and a robust z ((m - median) / 1.4826 MAD). A rank
is a straggler only after several consecutive slow windows, so one noisy step or GC pause flags nothing.
Job-wide slowdowns are told apart by the job's own history: a change in the job-level window median that is
confirmed only when its mean moves by >= 10% (Greyhound) and is blamed on no rank.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fleetguard.records.findings import Finding
from fleetguard.records.runtime import StepTiming

PeerGroups = Callable[[int], str] | Mapping[int, str]


@dataclass(frozen=True, slots=True)
class StragglerConfig:
    # Compute sections in priority order: the first one a job reports is scored, the others ignored, so a job
    # that times both "compute" and "step" is not counted twice. Collectives are never scored: fast ranks
    # wait longer inside them and would look slow.
    sections: tuple[str, ...] = ("compute", "step")
    # Window length, turned into steps from the median duration of the first steps of the job. Short
    # windows with persistence beat one long one: a 1.3x rank is flagged in ~12-16 steps, one outlier never.
    window_seconds: float = 4.0
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
    persistence_windows: int = 3
    report_every_windows: int = 12  # while flagged, re-report so lost_seconds reaches the action policy
    # The time a restart costs (runtime.restart_cost_seconds): a flagged rank is also reported in the window
    # its lost_seconds first passes it, so the policy acts then rather than at the next periodic report.
    action_cost_seconds: float | None = None
    change_min_shift_fraction: float = 0.10
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
        if self.persistence_windows < 1 or self.report_every_windows < 1:
            raise ValueError("persistence_windows and report_every_windows must be >= 1")

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
        "group",
        "host",
        "last_step",
        "lost_seconds",
        "onset_step",
        "ordered",
        "rank",
        "reported_at_streak",
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
        self.reported_at_streak = 0


class _Job:
    __slots__ = (
        "first_step",
        "last_eval_step",
        "levels",
        "max_step",
        "ranks",
        "section_priority",
        "sizing",
        "streaking",
        "window_steps",
    )

    def __init__(self, section_priority: int, first_step: int, baseline: int) -> None:
        self.section_priority = section_priority
        self.first_step = first_step
        self.sizing: list[float] = []
        self.window_steps: int | None = None
        self.ranks: dict[int, _Rank] = {}
        self.max_step = first_step
        self.last_eval_step = first_step
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
        median_step = _median(sorted(job.sizing))
        steps = c.max_window_steps if median_step <= 0 else math.ceil(c.window_seconds / median_step)
        job.window_steps = max(c.min_window_steps, min(c.max_window_steps, steps))
        job.last_eval_step = job.max_step
        job.sizing = []

    def check(self, now: float) -> list[Finding]:
        out: list[Finding] = []
        for job_id, job in self._jobs.items():
            w = job.window_steps
            if w is not None and job.max_step - job.last_eval_step >= w:
                out.extend(self._evaluate(job_id, job, now))
        return out

    # ---- one window ------------------------------------------------------------------------------------

    def _evaluate(self, job_id: str, job: _Job, now: float) -> list[Finding]:
        """Score one window. Kept to O(ranks) cheap Python: a median of a few values per rank, two sorts per
        group, one threshold comparison per rank; only slow ranks get findings work."""
        c = self.config
        w = job.window_steps
        assert w is not None
        since = job.last_eval_step
        job.last_eval_step = job.max_step
        self.windows_evaluated += 1
        mid, odd = w // 2, w % 2
        # silent this window (hung, dead, restarted): no opinion, and its streak ends below. Medians are
        # read from the incrementally sorted windows: the tick allocates a few lists, not one per rank,
        # which also keeps Python's cyclic GC from running inside it.
        active = [r for r in job.ranks.values() if r.last_step > since and len(r.ordered) >= w]
        ranks = [r.rank for r in active]
        if odd:
            medians = [r.ordered[mid] for r in active]
        else:
            medians = [0.5 * (r.ordered[mid - 1] + r.ordered[mid]) for r in active]
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
                out.extend(self._update_rank(job_id, job, group, s, g_ranks, g_medians, center, now))
        for rank in job.streaking - slow_now:
            r = job.ranks[rank]
            r.streak, r.lost_seconds, r.reported_at_streak = 0, 0.0, 0
        job.streaking = slow_now
        if all_sorted:
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
        now: float,
    ) -> list[Finding]:
        c = self.config
        r = job.ranks[s.rank]
        if r.streak == 0:
            r.onset_step = job.max_step
        r.streak += 1
        assert job.window_steps is not None
        lost_before = r.lost_seconds
        r.lost_seconds += job.window_steps * max(0.0, s.median_seconds - center)
        if r.streak < c.persistence_windows:
            return []
        cost = c.action_cost_seconds
        crossed = cost is not None and lost_before <= cost < r.lost_seconds
        if r.reported_at_streak and r.streak - r.reported_at_streak < c.report_every_windows and not crossed:
            return []
        first = r.reported_at_streak == 0
        r.reported_at_streak = r.streak
        evidence = {
            "group": group,
            "section": c.sections[job.section_priority],
            "window_steps": job.window_steps,
            "windows_flagged": r.streak,
            "onset_step": r.onset_step,
            "score": round(s.score, 4),
            "z": round(s.z, 2),
            "rank_median_seconds": s.median_seconds,
            "group_median_seconds": center,
            "slowdown": round(s.median_seconds / center, 4) if center > 0 else None,
            "lost_seconds": round(r.lost_seconds, 3),
            "update": not first,
            "episode_id": f"straggler/{job_id}/{s.rank}/{r.onset_step}",
            "per_rank_median_seconds": _medians_evidence(ranks, medians, s),
        }
        return [
            Finding(
                ts=now,
                finding_id=f"straggler/{job_id}/{s.rank}/{r.onset_step}/{r.streak}",
                kind="straggler",
                severity="warning",
                subject=f"job/{job_id}/rank/{s.rank}",
                summary=(
                    f"rank {s.rank} of job {job_id} is {s.median_seconds / center:.2f}x its peers' "
                    f"median over {r.streak} windows; job lost ~{r.lost_seconds:.1f} s so far"
                    if center > 0
                    else f"rank {s.rank} of job {job_id} is slower than its peers"
                ),
                host=r.host,
                job_id=job_id,
                rank=s.rank,
                evidence_json=json.dumps(evidence, sort_keys=True),
            )
        ]

    def _track_level(self, job_id: str, job: _Job, level: float, now: float) -> Finding | None:
        """Change point on the job-level step time: the last `persistence_windows` windows all sit on one
        side of the baseline mean, and their mean is >= 10% away from it. Confirmed shifts re-baseline."""
        c = self.config
        job.levels.append(level)
        p = c.persistence_windows
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
        evidence = {
            "section": c.sections[job.section_priority],
            "baseline_seconds": base,
            "recent_seconds": [round(v, 6) for v in recent],
            "shift_fraction": round(shift, 4),
            "window_steps": job.window_steps,
            "step": job.max_step,
        }
        return Finding(
            ts=now,
            finding_id=f"job_slowdown/{job_id}/{job.max_step}",
            kind="job_slowdown",
            severity="warning",
            subject=f"job/{job_id}",
            summary=f"job {job_id} slowed by {shift:.0%} on all ranks (not one straggler)",
            job_id=job_id,
            evidence_json=json.dumps(evidence, sort_keys=True),
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
