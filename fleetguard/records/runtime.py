"""Records from running training jobs: heartbeats, step/section timings and collective progress."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A rank is alive. `section` is what it is doing now (step, checkpoint, eval ...), if it said."""

    ts: float
    host: str
    job_id: str
    rank: int
    local_rank: int
    world_size: int
    pid: int
    step: int | None = None
    section: str | None = None
    status: str = "running"  # running | finished | error


@dataclass(frozen=True, slots=True)
class StepTiming:
    """How long one timed section of one step took on one rank (compute sections, not collectives)."""

    ts: float
    host: str
    job_id: str
    rank: int
    step: int
    section: str
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class CollectiveProgress:
    """Per process group, the last collective sequence numbers a rank enqueued, started and completed."""

    ts: float
    host: str
    job_id: str
    rank: int
    process_group: str
    last_enqueued: int
    last_started: int
    last_completed: int
    op: str | None = None  # profiling name of the last enqueued collective, e.g. nccl:all_reduce
    size: int | None = None  # elements of the last enqueued collective, where known
    source: str = "client"  # client | flight_recorder
