"""Adaptive heartbeat timeouts: which ranks of a job are dead (PID gone), hung (alive but silent or stalled).

Timeouts follow NVIDIA's resiliency extension: before any gap is known a rank may take `safety_factor` x the
time the job's ranks needed for their first heartbeat; afterwards `safety_factor` x the largest gap observed
on any rank, smoothed by an EMA, learned separately per section (step, checkpoint, eval ...) so a long
checkpoint is not a hang. Two clocks per rank: silence (no heartbeat at all, e.g. SIGSTOP) and stall
(heartbeats arrive from a background thread but the step/section does not move, e.g. stuck in a collective).
Pure logic: time comes only from arguments. Heartbeat timestamps and `now` must come from one clock (the
agent's, on the ranks' own host), since silence is `now - last heartbeat ts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from fleetguard.records.evidence import (
    HungRankEvidence,
    RankErrorEvidence,
    RankExitEvidence,
    evidence_json,
)
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.runtime import Heartbeat

DEFAULT_SECTION = "step"
# Sections whose timeouts a job learns: names come from the ranks, so a job cycling through new names must
# not grow the tables without end; a section past the cap keeps its initial timeout.
MAX_SECTIONS_PER_JOB = 32
# Exit codes of a process ended by SIGTERM, SIGINT or SIGHUP (negative signal numbers, as /proc reports them).
TERMINATION_EXIT_CODES = frozenset({-15, -2, -1})


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    safety_factor: float = 5.0
    ema_alpha: float = 0.5
    # A 1 s heartbeat would otherwise give a 5 s timeout that one slow scheduler tick could trip.
    min_timeout_seconds: float = 3.0
    # Until any rank of the job has sent its first heartbeat (imports, rendezvous, checkpoint load).
    first_heartbeat_timeout_seconds: float = 600.0
    # Once some ranks have started, the others get safety x their start-up time, but never less than this:
    # workers of one job import and rendezvous at different speeds, and a caller that registers the job
    # at its first heartbeat makes that start-up time look like zero.
    min_first_heartbeat_timeout_seconds: float = 30.0
    # From a rank's first heartbeat to its first step (model build, torch.compile, NCCL set-up, checkpoint
    # load): heartbeats arrive but no step moves, and nothing learned about steps applies yet.
    first_step_timeout_seconds: float = 600.0
    # A rank that said it is exiting (uncaught exception) is not hung while it tears down (destroying a
    # process group, flushing data loaders can take seconds under load); past this it is stuck exiting.
    exit_timeout_seconds: float = 60.0
    # Sections that run rarely (the first checkpoint has no learned duration) start from at least this.
    section_initial_timeout_seconds: Mapping[str, float] = field(
        default_factory=lambda: {"checkpoint": 600.0, "eval": 600.0}
    )

    def __post_init__(self) -> None:
        if self.safety_factor < 1.0:
            raise ValueError(f"safety_factor must be >= 1, got {self.safety_factor}")
        if not 0.0 < self.ema_alpha <= 1.0:
            raise ValueError(f"ema_alpha must be in (0, 1], got {self.ema_alpha}")
        if self.min_timeout_seconds <= 0 or self.first_heartbeat_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")


class _AdaptiveTimeout:
    """safety x largest interval seen, EMA-smoothed each time the maximum grows; None until one is seen."""

    __slots__ = ("max_interval_seconds", "timeout_seconds")

    def __init__(self) -> None:
        self.max_interval_seconds = 0.0
        self.timeout_seconds: float | None = None

    def learn(self, interval_seconds: float, config: HeartbeatConfig) -> None:
        if self.timeout_seconds is not None and interval_seconds <= self.max_interval_seconds:
            return
        self.max_interval_seconds = max(self.max_interval_seconds, interval_seconds)
        target = config.safety_factor * self.max_interval_seconds
        if self.timeout_seconds is None:
            self.timeout_seconds = target
        else:
            self.timeout_seconds = config.ema_alpha * target + (1.0 - config.ema_alpha) * self.timeout_seconds


class _Rank:
    __slots__ = (
        "dead_since",
        "exiting_since",
        "finished",
        "first_step",
        "host",
        "hung_since",
        "last_progress_at",
        "last_seen",
        "pid",
        "section",
        "step",
    )

    def __init__(self) -> None:
        self.host: str | None = None
        self.pid: int | None = None
        self.last_seen: float | None = None
        self.last_progress_at = 0.0
        self.step: int | None = None
        self.first_step: int | None = None  # the first step this incarnation reported (compiles, warms up)
        self.section = DEFAULT_SECTION
        self.finished = False
        self.exiting_since: float | None = None  # when it reported it is ending on an exception
        self.dead_since: float | None = None
        self.hung_since: float | None = None


class _Job:
    __slots__ = (
        "dead",
        "first_heartbeat_seconds",
        "gap",
        "ranks",
        "stall",
        "start_known",
        "started_at",
        "startup_reported",
    )

    def __init__(self, started_at: float, start_known: bool = True) -> None:
        self.started_at = started_at
        self.start_known = start_known
        # Only ranks that reported here: an agent sees its own host's ranks, and a multi-node job's ranks on
        # other hosts must not look like ranks that never sent a first heartbeat.
        self.ranks: dict[int, _Rank] = {}
        self.first_heartbeat_seconds: float | None = None  # max over ranks of (first heartbeat - start)
        self.gap: dict[str, _AdaptiveTimeout] = {}
        self.stall: dict[str, _AdaptiveTimeout] = {}
        self.startup_reported: set[int] = set()
        self.dead: set[int] = set()

    def rank(self, rank: int) -> _Rank:
        r = self.ranks.get(rank)
        if r is None:
            r = self.ranks[rank] = _Rank()
        return r


class HeartbeatMonitor:
    """Per-job heartbeat state; `check(now)` returns each new dead/hung/error problem once until it clears."""

    def __init__(self, config: HeartbeatConfig | None = None) -> None:
        self.config = config or HeartbeatConfig()
        self._jobs: dict[str, _Job] = {}
        self._pending: list[Finding] = []
        self.skipped_records = 0

    # ---- input ----------------------------------------------------------------------------------------

    def register_job(
        self, job_id: str, world_size: int, started_at: float, local_ranks: Iterable[int] = ()
    ) -> None:
        """Start (or, after a restart, restart) watching a job; learned timeouts survive a restart.
        `local_ranks` are the ranks expected to report here (one that never does is hung); any other rank
        is watched from its first report, so ranks on other hosts are never missed here."""
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        old = self._jobs.get(job_id)
        job = _Job(started_at)
        for rank in local_ranks:
            job.rank(rank)
        if old is not None:
            job.gap, job.stall, job.first_heartbeat_seconds = old.gap, old.stall, old.first_heartbeat_seconds
        self._jobs[job_id] = job

    def forget_job(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def jobs(self) -> list[str]:
        return list(self._jobs)

    def observe(self, hb: Heartbeat, now: float) -> None:
        """Take one heartbeat; a job never registered is registered from it (start = its timestamp)."""
        if hb.rank < 0 or hb.world_size < 1:
            self.skipped_records += 1
            return
        job = self._jobs.get(hb.job_id)
        if job is None:
            # Never registered: when it started is unknown, so time-to-first-heartbeat teaches nothing and
            # ranks not yet seen get the full first-heartbeat timeout.
            job = self._jobs[hb.job_id] = _Job(min(hb.ts, now), start_known=False)
        r = job.rank(hb.rank)
        ts = hb.ts
        if r.dead_since is not None:
            if ts <= r.dead_since:
                return  # written before the process died, delivered late
            r.dead_since = None  # a new incarnation (the job was restarted)
            job.dead.discard(hb.rank)
            r.last_seen = None
        section = hb.section or DEFAULT_SECTION
        new_incarnation = r.last_seen is None or (r.pid is not None and hb.pid != r.pid)
        if new_incarnation:
            if r.last_seen is None:
                self._learn_first_heartbeat(job, ts)
                job.startup_reported.discard(hb.rank)
            r.last_progress_at = ts
            r.hung_since = None
            r.exiting_since = None
            r.first_step = None
        else:
            assert r.last_seen is not None
            if ts < r.last_seen:
                return  # out of order; the newer heartbeat already counted
            if r.hung_since is None:  # an interval that was itself a hang must not teach us to wait longer
                _timeout_of(job.gap, r.section).learn(ts - r.last_seen, self.config)
            progressed = hb.step != r.step or section != r.section
            if progressed:
                # Only a move between two real steps teaches how long a step takes: the time to the first
                # step and the first step itself are start-up (compilation, NCCL set-up, checkpoint load,
                # warm-up) and have their own timeout.
                if (
                    r.hung_since is None
                    and r.step is not None
                    and hb.step is not None
                    and r.step != r.first_step
                ):
                    _timeout_of(job.stall, r.section).learn(ts - r.last_progress_at, self.config)
                r.last_progress_at = ts
        r.host, r.pid, r.last_seen, r.step, r.section = hb.host, hb.pid, ts, hb.step, section
        if r.first_step is None:
            r.first_step = hb.step
        if r.hung_since is not None and r.last_progress_at >= r.hung_since:
            r.hung_since = None  # it moved again: the problem has cleared
        if hb.status == "finished":
            r.finished = True
        elif hb.status == "exiting":
            # its exit decides what it was (dead, with the code it dies with), not its silence meanwhile
            r.exiting_since = ts if r.exiting_since is None else r.exiting_since
        elif hb.status == "error":
            self._pending.append(
                _finding(
                    FindingKind.RANK_ERROR,
                    hb.job_id,
                    hb.rank,
                    r,
                    ts,
                    f"rank {hb.rank} of job {hb.job_id} reported an error status",
                    RankErrorEvidence(hb.status, hb.step, section, hb.pid),
                )
            )
            r.finished = True  # the process will exit; its exit is what we act on next

    def process_exited(
        self,
        job_id: str,
        rank: int,
        exit_code: int | None,
        now: float,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        """The PID watcher saw a rank's process end: a non-zero (or unknown) exit is a dead rank, reported at
        the next `check`, whatever its heartbeats did before. Exit code 0 is a rank that finished. `detail`
        joins the finding's evidence (the exception it failed with, the other failures of its group)."""
        job = self._jobs.get(job_id)
        if job is None or rank < 0:
            self.skipped_records += 1
            return
        r = job.rank(rank)
        if exit_code == 0 or (r.finished and exit_code is None):
            r.finished = True
            return
        if r.dead_since is not None:
            return
        r.dead_since = now
        job.dead.add(rank)
        r.hung_since = None
        evidence = RankExitEvidence(
            exit_code, r.pid, r.last_seen, r.step, MappingProxyType(dict(detail or {}))
        )
        if exit_code in TERMINATION_EXIT_CODES:
            # Asked to stop, not crashed: launchers tear a worker group down with SIGTERM when a rank on
            # another node failed or the job was cancelled (scancel, pod deletion, Ctrl-C). Acting on it
            # here would restart a job someone stopped, or a group its own launcher is already restarting.
            self._pending.append(
                _finding(
                    FindingKind.RANK_TERMINATED,
                    job_id,
                    rank,
                    r,
                    now,
                    f"rank {rank} of job {job_id} was terminated by signal {-exit_code} (launcher teardown or"
                    " cancellation)",
                    evidence,
                    severity=Severity.WARNING,
                )
            )
            return
        how = f" with code {exit_code}" if exit_code is not None else " (exit code unknown)"
        error = (detail or {}).get("error")
        summary = f"rank {rank} of job {job_id} exited{how}"
        if isinstance(error, str):
            summary = f"rank {rank} of job {job_id} failed with {error}"
        self._pending.append(_finding(FindingKind.DEAD_RANK, job_id, rank, r, now, summary, evidence))

    # ---- analysis -------------------------------------------------------------------------------------

    def timeout_seconds(self, job_id: str, section: str = DEFAULT_SECTION, kind: str = "gap") -> float:
        """The timeout in force for a section: kind "gap" (silence) or "stall" (no step progress)."""
        job = self._jobs[job_id]
        return self._timeout(job, section, job.gap if kind == "gap" else job.stall)

    def check(self, now: float) -> list[Finding]:
        """New problems since the last check: dead and error ranks, then hung ranks (overdue heartbeat or
        progress). A job with a dead rank reports no hangs: its peers waiting in collectives are a
        consequence, not a second fault."""
        out, self._pending = self._pending, []
        for job_id, job in self._jobs.items():
            out.extend(self._check_job(job_id, job, now))
        return out

    def _check_job(self, job_id: str, job: _Job, now: float) -> list[Finding]:
        ranks = job.ranks
        if job.dead:
            return []
        exiting = [(i, r) for i, r in ranks.items() if r.exiting_since is not None and r.hung_since is None]
        if exiting:
            # a rank is ending on its exception: its peers waiting for it are a consequence, and its own exit
            # (seen by the PID watcher) will say it is dead; only a rank that never gets out is hung
            return [f for i, r in exiting for f in self._stuck_exiting(job_id, i, r, now)]
        out: list[Finding] = []
        gap_cache: dict[str, float] = {}
        stall_cache: dict[str, float] = {}
        startup_timeout = max(
            self.config.min_first_heartbeat_timeout_seconds, self._initial_timeout(job, DEFAULT_SECTION)
        )
        startup_step_timeout = self.config.first_step_timeout_seconds
        for rank, r in ranks.items():
            if r.finished or r.hung_since is not None:
                continue
            last_seen = r.last_seen
            if last_seen is None:
                waited = now - job.started_at
                if waited > startup_timeout and rank not in job.startup_reported:
                    job.startup_reported.add(rank)
                    out.append(
                        _finding(
                            FindingKind.HUNG_RANK,
                            job_id,
                            rank,
                            r,
                            now,
                            f"rank {rank} of job {job_id} sent no first heartbeat in {waited:.1f} s",
                            HungRankEvidence("no_first_heartbeat", waited, startup_timeout),
                        )
                    )
                continue
            section = r.section
            gap_timeout = gap_cache.get(section)
            if gap_timeout is None:
                gap_timeout = gap_cache[section] = self._timeout(job, section, job.gap)
                stall_cache[section] = self._timeout(job, section, job.stall)
            silent = now - last_seen
            stalled = now - r.last_progress_at
            learned = job.stall.get(section)
            if section == DEFAULT_SECTION and (learned is None or learned.timeout_seconds is None):
                # The default section is where ranks wait between their timed sections (collectives).
                # Heartbeats sampled mid-step rarely catch a rank there, so it may have learned nothing of
                # its own: a warmed-up rank stuck there gets the slowest section the job has learned, not
                # the start-up timeout (which let a rank wait 10 minutes in a collective its peer skipped).
                slowest = _slowest_learned(job.stall)
                if slowest is not None and slowest.timeout_seconds is not None:
                    learned = slowest
                    stall_cache[section] = max(self.config.min_timeout_seconds, slowest.timeout_seconds)
            warmed_up = r.step is not None and r.step != r.first_step  # past this incarnation's first step
            stall_timeout = (
                stall_cache[section]
                if warmed_up and learned is not None and learned.timeout_seconds is not None
                # start-up: before and during the first step of every incarnation (a restarted group loads
                # its checkpoint and compiles again), whatever steps taught before the restart
                else max(startup_step_timeout, stall_cache[section])
            )
            if silent > gap_timeout:
                cause, waited, timeout = "silent", silent, gap_timeout
            elif stalled > stall_timeout:
                cause, waited, timeout = "stalled", stalled, stall_timeout
            else:
                continue
            r.hung_since = now
            out.append(
                _finding(
                    FindingKind.HUNG_RANK,
                    job_id,
                    rank,
                    r,
                    now,
                    f"rank {rank} of job {job_id} {'silent' if cause == 'silent' else 'made no progress'} "
                    f"for {waited:.1f} s in section {section} (timeout {timeout:.1f} s)",
                    HungRankEvidence(
                        cause,
                        waited,
                        timeout,
                        section=section,
                        step=r.step,
                        pid=r.pid,
                        last_heartbeat_ts=last_seen,
                        last_progress_ts=r.last_progress_at,
                    ),
                )
            )
        return out

    def _stuck_exiting(self, job_id: str, rank: int, r: _Rank, now: float) -> list[Finding]:
        assert r.exiting_since is not None
        waited = now - r.exiting_since
        if waited <= self.config.exit_timeout_seconds:
            return []
        r.hung_since = now
        evidence = HungRankEvidence(
            "stuck_exiting",
            waited,
            self.config.exit_timeout_seconds,
            section=r.section,
            step=r.step,
            pid=r.pid,
        )
        summary = f"rank {rank} of job {job_id} said it is exiting {waited:.1f} s ago and has not exited"
        return [_finding(FindingKind.HUNG_RANK, job_id, rank, r, now, summary, evidence)]

    def hung_ranks(self, job_id: str) -> list[int]:
        """Ranks of a job currently flagged hung (reported and not yet moving again)."""
        job = self._jobs.get(job_id)
        if job is None:
            return []
        hung = {i for i, r in job.ranks.items() if r.hung_since is not None}
        return sorted(hung | job.startup_reported)

    def steps(self, job_id: str) -> dict[int, tuple[int, float | None, bool]]:
        """(last step, when it last moved, flagged hung) of each live rank of a job that began a step."""
        job = self._jobs.get(job_id)
        if job is None:
            return {}
        hung = set(self.hung_ranks(job_id))
        return {
            i: (r.step, r.last_progress_at, i in hung)
            for i, r in job.ranks.items()
            if r.step is not None and r.last_seen is not None and not r.finished and r.dead_since is None
        }

    def hosts(self, job_id: str) -> dict[int, str]:
        """The host each rank of a job reported from."""
        job = self._jobs.get(job_id)
        return {} if job is None else {i: r.host for i, r in job.ranks.items() if r.host is not None}

    def sections(self, job_id: str) -> dict[int, str]:
        """The section each live rank of a job last reported (finished and dead ranks left out)."""
        job = self._jobs.get(job_id)
        if job is None:
            return {}
        return {
            i: r.section
            for i, r in job.ranks.items()
            if r.last_seen is not None and not r.finished and r.dead_since is None
        }

    def _learn_first_heartbeat(self, job: _Job, ts: float) -> None:
        if not job.start_known:
            return
        took = max(0.0, ts - job.started_at)
        if job.first_heartbeat_seconds is None or took > job.first_heartbeat_seconds:
            job.first_heartbeat_seconds = took

    def _initial_timeout(self, job: _Job, section: str) -> float:
        c = self.config
        if job.first_heartbeat_seconds is None:
            base = c.first_heartbeat_timeout_seconds
        else:
            base = c.safety_factor * job.first_heartbeat_seconds
        return max(c.min_timeout_seconds, base, c.section_initial_timeout_seconds.get(section, 0.0))

    def _timeout(self, job: _Job, section: str, table: dict[str, _AdaptiveTimeout]) -> float:
        learned = table.get(section)
        if learned is None or learned.timeout_seconds is None:
            return self._initial_timeout(job, section)
        return max(self.config.min_timeout_seconds, learned.timeout_seconds)


def _slowest_learned(table: dict[str, _AdaptiveTimeout]) -> _AdaptiveTimeout | None:
    learned = [t for t in table.values() if t.timeout_seconds is not None]
    return max(learned, key=lambda t: t.timeout_seconds or 0.0) if learned else None


def _timeout_of(table: dict[str, _AdaptiveTimeout], section: str) -> _AdaptiveTimeout:
    """The section's learned timeout; past MAX_SECTIONS_PER_JOB sections a throwaway one (not kept)."""
    found = table.get(section)
    if found is None:
        found = _AdaptiveTimeout()
        if len(table) < MAX_SECTIONS_PER_JOB:
            table[section] = found
    return found


def _finding(
    kind: FindingKind,
    job_id: str,
    rank: int,
    r: _Rank,
    now: float,
    summary: str,
    evidence: RankExitEvidence | HungRankEvidence | RankErrorEvidence,
    severity: Severity = Severity.CRITICAL,
) -> Finding:
    """The factory of this module's kinds, each with its record: dead and terminated ranks
    (`RankExitEvidence`), hung ranks (`HungRankEvidence`), error ranks (`RankErrorEvidence`); the id is the
    rank and the time it was seen."""
    return Finding(
        ts=now,
        finding_id=finding_id(kind, job_id, rank, now),
        kind=kind,
        severity=severity,
        subject=f"job/{job_id}/rank/{rank}",
        summary=summary,
        host=r.host,
        job_id=job_id,
        rank=rank,
        evidence_json=evidence_json(evidence),
    )
