"""What the agent knows about the local ranks of each job: pid, step, status, latest complete checkpoint,
and how many times torchrun has restarted the worker group (a rank reporting from a new pid).

Bounded whatever local users send (`RuntimeLimits`): ranks and jobs per owner uid and in total, a few pids
remembered per rank, and jobs silent for `job_idle_seconds` forgotten."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from fleetguard.jobcontrol.trust import ProcessIdentity, job_owner
from fleetguard.records.runtime import Heartbeat

RECENT_PIDS = 8  # pids remembered per rank: an old pid reappearing after more restarts counts as new


@dataclass(frozen=True, slots=True)
class RuntimeLimits:
    """How much runtime state local users can make the agent hold. A uid's share is well below the total,
    so one user cannot lock the others out; root's jobs count like anyone's."""

    max_jobs_per_uid: int = 16
    max_ranks_per_uid: int = 512
    max_jobs: int = 128
    max_ranks: int = 4096
    job_idle_seconds: float = 900.0  # a job none of whose ranks reported for this long is forgotten

    def __post_init__(self) -> None:
        counts = (self.max_jobs_per_uid, self.max_ranks_per_uid, self.max_jobs, self.max_ranks)
        if min(counts) < 1:
            raise ValueError("runtime limits must be >= 1")
        if self.max_jobs_per_uid > self.max_jobs or self.max_ranks_per_uid > self.max_ranks:
            raise ValueError("a per-uid runtime limit cannot exceed the total")
        if not 0 < self.job_idle_seconds < float("inf"):
            raise ValueError("job_idle_seconds must be positive and finite")


class LimitExceeded(Exception):
    """A report that would take its owner, or the agent, over a RuntimeLimits bound (answered 429)."""


@dataclass
class RankInfo:
    rank: int
    local_rank: int
    world_size: int
    pid: int
    status: str = "running"
    step: int | None = None
    last_report_ts: float = 0.0
    alive: bool = True
    recent_pids: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_PIDS))
    pid_changes: int = 0
    incarnation: int = 0  # the job's restart count when this rank's current pid first reported
    # the rank's process when it is the sender's own (trust.trusted_pid): only then watched and signalled
    process: ProcessIdentity | None = None

    @property
    def pid_trusted(self) -> bool:
        return self.process is not None

    def copy(self) -> RankInfo:
        return RankInfo(**{**self.__dict__, "recent_pids": deque(self.recent_pids, maxlen=RECENT_PIDS)})


@dataclass
class JobInfo:
    job_id: str  # the job key (trust.job_key): owner uid and reported id
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    checkpoint_step: int | None = None
    expected_ranks: int = 0  # local ranks announced (LOCAL_WORLD_SIZE): counted against the limits
    last_report_ts: float = 0.0

    @property
    def restarts(self) -> int:
        return max((r.pid_changes for r in self.ranks.values()), default=0)

    @property
    def size(self) -> int:
        return max(len(self.ranks), self.expected_ranks)

    def live_pids(self) -> dict[int, int]:
        return {r.rank: r.pid for r in self.ranks.values() if r.alive and r.pid_trusted}

    def live_ranks(self) -> dict[int, ProcessIdentity | None]:
        return {r.rank: r.process for r in self.ranks.values() if r.alive}


class RankRegistry:
    """Thread-safe: reports come on HTTP threads, exits on the watcher thread, reads on the action thread."""

    def __init__(self, limits: RuntimeLimits | None = None) -> None:
        self.limits = limits or RuntimeLimits()
        self._jobs: dict[str, JobInfo] = {}
        self._jobs_of: dict[int | None, int] = {}  # owner uid -> jobs
        self._ranks_of: dict[int | None, int] = {}  # owner uid -> ranks (reported or announced)
        self._ranks_total = 0
        self._lock = threading.Lock()

    def update(
        self,
        heartbeat: Heartbeat,
        checkpoint_step: int | None,
        process: ProcessIdentity | None = None,
        expected_ranks: int = 1,
    ) -> bool:
        """Record a report; True when it is the first of a new worker-group incarnation of its job (the job's
        first report, or the first report after a restart). LimitExceeded when it would hold too much."""
        with self._lock:
            job, new_job = self._job_for(heartbeat, expected_ranks)
            info = job.ranks.get(heartbeat.rank)
            restarted = False
            if info is None:
                info = RankInfo(heartbeat.rank, heartbeat.local_rank, heartbeat.world_size, heartbeat.pid)
                info.recent_pids.append(heartbeat.pid)
                info.incarnation = job.restarts
                job.ranks[heartbeat.rank] = info
            if heartbeat.pid not in info.recent_pids:
                before = job.restarts
                info.recent_pids.append(heartbeat.pid)
                info.pid_changes += 1
                restarted = job.restarts > before
                info.incarnation = job.restarts
            _apply(info, heartbeat, process)
            job.last_report_ts = max(job.last_report_ts, heartbeat.ts)
            if checkpoint_step is not None and (
                job.checkpoint_step is None or checkpoint_step > job.checkpoint_step
            ):
                job.checkpoint_step = checkpoint_step
            return new_job or restarted

    def _job_for(self, heartbeat: Heartbeat, expected_ranks: int) -> tuple[JobInfo, bool]:
        """The job the report belongs to, created or grown within the limits (caller holds the lock)."""
        owner, _ = job_owner(heartbeat.job_id)
        job = self._jobs.get(heartbeat.job_id)
        new_job = job is None
        if job is None:
            if self._jobs_of.get(owner, 0) >= self.limits.max_jobs_per_uid:
                raise LimitExceeded(f"uid {owner} already has {self.limits.max_jobs_per_uid} jobs here")
            if len(self._jobs) >= self.limits.max_jobs:
                raise LimitExceeded(f"the agent already watches {self.limits.max_jobs} jobs")
            job = JobInfo(heartbeat.job_id)
        ranks_after = len(job.ranks) + (heartbeat.rank not in job.ranks)
        grow = max(ranks_after, expected_ranks, job.expected_ranks) - job.size
        if grow > 0:
            if self._ranks_of.get(owner, 0) + grow > self.limits.max_ranks_per_uid:
                raise LimitExceeded(f"uid {owner} would have more than {self.limits.max_ranks_per_uid} ranks")
            if self._ranks_total + grow > self.limits.max_ranks:
                raise LimitExceeded(f"the agent would watch more than {self.limits.max_ranks} ranks")
            self._ranks_of[owner] = self._ranks_of.get(owner, 0) + grow
            self._ranks_total += grow
        job.expected_ranks = max(job.expected_ranks, expected_ranks)
        if new_job:
            self._jobs[heartbeat.job_id] = job
            self._jobs_of[owner] = self._jobs_of.get(owner, 0) + 1
        return job, new_job

    def evict_idle(self, now: float) -> list[str]:
        """Forget the jobs none of whose ranks reported within `job_idle_seconds`; their keys."""
        with self._lock:
            idle = [k for k, j in self._jobs.items() if now - j.last_report_ts > self.limits.job_idle_seconds]
            for key in idle:
                self._remove(key)
            return idle

    def _remove(self, key: str) -> None:
        job = self._jobs.pop(key)
        owner, _ = job_owner(key)
        self._jobs_of[owner] -= 1
        self._ranks_of[owner] -= job.size
        self._ranks_total -= job.size
        for table in (self._jobs_of, self._ranks_of):
            if table.get(owner) == 0:
                del table[owner]

    def mark_exited(self, job_id: str, rank: int, pid: int) -> RankInfo | None:
        """The process `pid` of this rank exited; returns the rank as it was (None if
        unknown or superseded)."""
        with self._lock:
            job = self._jobs.get(job_id)
            info = job.ranks.get(rank) if job else None
            if info is None or info.pid != pid:
                return None
            info.alive = False
            return info.copy()

    def restarts(self, job_id: str) -> int:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.restarts if job else 0

    def live_pids(self, job_id: str) -> dict[int, int]:
        """{rank: pid} of the job's live ranks whose pid the agent may watch and signal."""
        with self._lock:
            job = self._jobs.get(job_id)
            return job.live_pids() if job else {}

    def live_ranks(self, job_id: str) -> dict[int, ProcessIdentity | None]:
        """{rank: its process, or None when only heartbeats judge it} of the job's live ranks."""
        with self._lock:
            job = self._jobs.get(job_id)
            return job.live_ranks() if job else {}

    def job(self, job_id: str) -> JobInfo | None:
        """A snapshot copy of one job (safe to read without the lock)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            ranks = {r: i.copy() for r, i in job.ranks.items()}
            return JobInfo(job.job_id, ranks, job.checkpoint_step, job.expected_ranks, job.last_report_ts)

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def rank_count(self) -> int:
        """Ranks held (reported or announced) over every job."""
        with self._lock:
            return self._ranks_total


def _apply(info: RankInfo, heartbeat: Heartbeat, process: ProcessIdentity | None) -> None:
    info.pid = heartbeat.pid
    info.process = process
    info.local_rank = heartbeat.local_rank
    info.world_size = heartbeat.world_size
    info.status = heartbeat.status
    info.step = heartbeat.step
    info.last_report_ts = heartbeat.ts
    info.alive = True
