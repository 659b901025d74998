"""What the agent knows about the local ranks of each job: pid, step, status, latest complete checkpoint,
and how many times torchrun has restarted the worker group (a rank reporting from a new pid)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from fleetguard.records.runtime import Heartbeat


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
    pids_seen: list[int] = field(default_factory=list)
    incarnation: int = 0  # the job's restart count when this rank's current pid first reported
    pid_trusted: bool = True  # the pid belongs to the sender: only then is it watched and signalled


@dataclass
class JobInfo:
    job_id: str
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    checkpoint_step: int | None = None
    # checkpoint step when each worker-group incarnation started (index = restart count)
    checkpoint_step_at_restart: list[int | None] = field(default_factory=lambda: [None])

    @property
    def restarts(self) -> int:
        return max((len(r.pids_seen) - 1 for r in self.ranks.values()), default=0)

    def live_pids(self) -> dict[int, int]:
        return {r.rank: r.pid for r in self.ranks.values() if r.alive and r.pid_trusted}


class RankRegistry:
    """Thread-safe: reports come on HTTP threads, exits on the watcher thread, reads on the action thread."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobInfo] = {}
        self._lock = threading.Lock()

    def update(self, heartbeat: Heartbeat, checkpoint_step: int | None, pid_trusted: bool = True) -> bool:
        """Record a report; True when it is the first of a new worker-group incarnation of its job (the job's
        first report, or the first report after a restart)."""
        with self._lock:
            new_job = heartbeat.job_id not in self._jobs
            job = self._jobs.setdefault(heartbeat.job_id, JobInfo(heartbeat.job_id))
            info = job.ranks.get(heartbeat.rank)
            restarted = False
            if info is None:
                info = RankInfo(heartbeat.rank, heartbeat.local_rank, heartbeat.world_size, heartbeat.pid)
                info.pids_seen.append(heartbeat.pid)
                info.incarnation = job.restarts
                job.ranks[heartbeat.rank] = info
            if heartbeat.pid not in info.pids_seen:
                before = job.restarts
                info.pids_seen.append(heartbeat.pid)
                if job.restarts > before:
                    job.checkpoint_step_at_restart.append(job.checkpoint_step)
                    restarted = True
                info.incarnation = job.restarts
            info.pid = heartbeat.pid
            info.pid_trusted = pid_trusted
            info.local_rank = heartbeat.local_rank
            info.world_size = heartbeat.world_size
            info.status = heartbeat.status
            info.step = heartbeat.step
            info.last_report_ts = heartbeat.ts
            info.alive = True
            if checkpoint_step is not None and (
                job.checkpoint_step is None or checkpoint_step > job.checkpoint_step
            ):
                job.checkpoint_step = checkpoint_step
            return new_job or restarted

    def mark_exited(self, job_id: str, rank: int, pid: int) -> RankInfo | None:
        """The process `pid` of this rank exited; returns the rank as it was (None if
        unknown or superseded)."""
        with self._lock:
            job = self._jobs.get(job_id)
            info = job.ranks.get(rank) if job else None
            if info is None or info.pid != pid:
                return None
            info.alive = False
            return RankInfo(**{**info.__dict__, "pids_seen": list(info.pids_seen)})

    def restarts(self, job_id: str) -> int:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.restarts if job else 0

    def live_pids(self, job_id: str) -> dict[int, int]:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.live_pids() if job else {}

    def job(self, job_id: str) -> JobInfo | None:
        """A snapshot copy of one job (safe to read without the lock)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            return JobInfo(
                job.job_id,
                {r: RankInfo(**{**i.__dict__, "pids_seen": list(i.pids_seen)}) for r, i in job.ranks.items()},
                job.checkpoint_step,
                list(job.checkpoint_step_at_restart),
            )

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)
