"""Training jobs: which are running and where, their ranks, and the rank x time grid of step times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import BUCKET, TS, Cursor, as_int, fetch

# A job with no heartbeat for this long is no longer listed as running.
JOB_WINDOW_SECONDS: Final = 900.0
MAX_HEATMAP_BUCKETS: Final = 120


@dataclass(frozen=True, slots=True)
class JobSummary:
    job_id: str
    ranks: int
    world_size: int
    hosts: int
    last_ts: float
    last_step: int | None
    errors: int  # ranks whose newest heartbeat says error
    finished: int  # ranks whose newest heartbeat says finished


_JOBS_SQL: Final = f"""
WITH ranks AS (
  SELECT job_id, rank, arg_max(host, ts) AS host, max(world_size) AS world_size, max(ts) AS last_ts,
         max(step) AS step, arg_max(status, ts) AS status
  FROM heartbeats WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
  GROUP BY job_id, rank
)
SELECT job_id, count(*), max(world_size), count(DISTINCT host), epoch(max(last_ts)), max(step),
       count(*) FILTER (WHERE status = 'error'), count(*) FILTER (WHERE status = 'finished')
FROM ranks GROUP BY job_id ORDER BY max(last_ts) DESC
"""


def jobs(
    cur: Cursor, now: float, host: str | None = None, window: float = JOB_WINDOW_SECONDS
) -> list[JobSummary]:
    rows = fetch(cur, _JOBS_SQL, [now - window, now, host, host])
    return [
        JobSummary(
            str(r[0]), as_int(r[1]), as_int(r[2]), as_int(r[3]), float(r[4]), r[5], as_int(r[6]), as_int(r[7])
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    host: str
    local_rank: int
    pid: int
    last_ts: float
    step: int | None
    section: str | None
    status: str


_RANKS_SQL: Final = f"""
SELECT rank, arg_max(host, ts), arg_max(local_rank, ts), arg_max(pid, ts), epoch(max(ts)), max(step),
       arg_max(section, ts), arg_max(status, ts)
FROM heartbeats WHERE ts >= {TS} AND ts <= {TS} AND job_id = ?
GROUP BY rank ORDER BY rank
"""


def job_ranks(cur: Cursor, job_id: str, since: float, until: float) -> list[RankRow]:
    rows = fetch(cur, _RANKS_SQL, [since, until, job_id])
    return [
        RankRow(int(r[0]), str(r[1]), as_int(r[2]), as_int(r[3]), float(r[4]), r[5], r[6], str(r[7]))
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class StepGrid:
    """Median step time per rank per time bucket (None where a rank reported nothing)."""

    ranks: list[int]
    bucket_ts: list[float]
    seconds: list[list[float | None]]  # [rank][bucket]


_GRID_SQL: Final = f"""
SELECT rank, {BUCKET} AS b,
       median(duration_seconds)
FROM step_timings WHERE ts >= {TS} AND ts <= {TS} AND job_id = ? AND (? IS NULL OR section = ?)
GROUP BY rank, b
"""


def step_grid(cur: Cursor, job_id: str, since: float, until: float, section: str | None = None) -> StepGrid:
    bucket = max(1.0, float(int((until - since) / MAX_HEATMAP_BUCKETS) or 1))
    rows = fetch(cur, _GRID_SQL, [bucket, since, until, job_id, section, section])
    ranks = sorted({int(r[0]) for r in rows})
    buckets = sorted({float(r[1]) for r in rows})
    rank_at = {r: i for i, r in enumerate(ranks)}
    bucket_at = {b: i for i, b in enumerate(buckets)}
    grid: list[list[float | None]] = [[None] * len(buckets) for _ in ranks]
    for r in rows:
        grid[rank_at[int(r[0])]][bucket_at[float(r[1])]] = float(r[2])
    return StepGrid(ranks, buckets, grid)


@dataclass(frozen=True, slots=True)
class Restart:
    ts: float
    action: str
    target: str
    outcome: str
    detail: str
    resumed_step: int | None  # the first step the job reported after it (the checkpoint it resumed from)


_RESTARTS_SQL: Final = f"""
SELECT epoch(a.ts), a.action, a.target, a.outcome, a.detail,
       (SELECT min(h.step) FROM heartbeats h
        WHERE h.job_id = ? AND h.ts > a.ts AND h.ts <= a.ts + INTERVAL 10 MINUTE) AS resumed
FROM actions a
WHERE a.ts >= {TS} AND a.ts <= {TS} AND (a.target = ? OR starts_with(a.target, ?))
ORDER BY a.ts DESC LIMIT 200
"""


def job_actions(cur: Cursor, job_id: str, since: float, until: float) -> list[Restart]:
    """Actions on the job (checkpoint, restart, stop), newest first, with the step it resumed at."""
    target = f"job/{job_id}"
    rows = fetch(cur, _RESTARTS_SQL, [job_id, since, until, target, target + "@"])
    return [Restart(float(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), r[5]) for r in rows]
