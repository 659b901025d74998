"""A simulated synchronous training job for the straggler benchmarks: the records a real job's ranks would
send, in simulated time, fed to a RuntimeAnalyzer that ticks once per simulated second.

Each step every rank computes for `step_seconds` x (1 +- jitter) (x `slow_factor` on the slow rank), GC-like
pauses hit a random rank on a fraction of steps (the pause also holds back that rank's heartbeat thread, as
the GIL would), then an all-reduce that ends when the slowest rank arrives. Heartbeats come from a background
thread every `heartbeat_seconds` with the rank's current step. A rank can be frozen (SIGSTOP) or killed at a
set time. Not a benchmark itself; imported by bench/straggler_*.py.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from fleetguard.records.findings import Finding
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from straggler.analysis import RuntimeAnalyzer

JOB = "sim-job"
COMM_SECONDS = 0.05


@dataclass
class SimConfig:
    ranks: int = 64
    steps: int = 1000
    step_seconds: float = 1.0
    jitter_fraction: float = 0.05
    pause_probability: float = 0.01  # per step, on one random rank
    pause_fraction: tuple[float, float] = (0.5, 1.5)
    heartbeat_seconds: float = 1.0
    slow_rank: int | None = None
    slow_factor: float = 1.3
    slow_from_seconds: float = 0.0
    freeze_rank: int | None = None
    freeze_at_seconds: float = float("inf")
    seed: int = 0


@dataclass
class SimResult:
    findings: list[Finding] = field(default_factory=list)
    end_seconds: float = 0.0
    steps_done: int = 0
    pauses: int = 0


def run_job(cfg: SimConfig, analyzer: RuntimeAnalyzer | None = None, start: float = 0.0) -> SimResult:
    """Run the job for `cfg.steps` steps (or until it is frozen for 60 s); findings of every tick."""
    rng = random.Random(cfg.seed)
    a = analyzer or RuntimeAnalyzer()
    a.register_job(JOB, cfg.ranks, start)
    result = SimResult()
    phase = [rng.random() * cfg.heartbeat_seconds for _ in range(cfg.ranks)]
    hb_heap = [(start + 0.5 + p, r) for r, p in enumerate(phase)]  # first beat after imports, rendezvous
    heapq.heapify(hb_heap)
    next_tick = start + 1.0
    t = start + 0.5
    current_step = [0] * cfg.ranks
    paused_until = [0.0] * cfg.ranks
    frozen = False

    def emit_until(until: float, events: list[tuple[float, int, object]]) -> None:
        nonlocal next_tick
        events.sort(key=lambda e: (e[0], e[1]))
        i = 0
        while True:
            hb_at, r = hb_heap[0]
            now = min(next_tick, hb_at, events[i][0] if i < len(events) else next_tick)
            if now > until:
                break
            if i < len(events) and events[i][0] == now:
                a.observe(events[i][2], now)  # type: ignore[arg-type]
                i += 1
            elif hb_at == now:
                if now < paused_until[r]:
                    heapq.heapreplace(hb_heap, (paused_until[r], r))  # the GIL is held: the thread waits
                    continue
                if not (r == cfg.freeze_rank and now >= cfg.freeze_at_seconds):
                    a.observe(
                        Heartbeat(
                            ts=now,
                            host=f"h{r // 8}",
                            job_id=JOB,
                            rank=r,
                            local_rank=r % 8,
                            world_size=cfg.ranks,
                            pid=10_000 + r,
                            step=current_step[r],
                        ),
                        now,
                    )
                heapq.heapreplace(hb_heap, (now + cfg.heartbeat_seconds, r))
            else:
                result.findings.extend(a.tick(now))
                next_tick += 1.0

    for step in range(cfg.steps):
        events: list[tuple[float, int, object]] = []
        arrive = []
        pause_rank = rng.randrange(cfg.ranks) if rng.random() < cfg.pause_probability else -1
        for r in range(cfg.ranks):
            d = cfg.step_seconds * (1.0 + rng.uniform(-cfg.jitter_fraction, cfg.jitter_fraction))
            if r == cfg.slow_rank and t >= cfg.slow_from_seconds:
                d *= cfg.slow_factor
            if r == pause_rank:
                result.pauses += 1
                pause = cfg.step_seconds * rng.uniform(*cfg.pause_fraction)
                paused_until[r] = t + d + pause
                d += pause
            current_step[r] = step
            if r == cfg.freeze_rank and t + d >= cfg.freeze_at_seconds:
                frozen = True
                continue
            events.append(
                (
                    t + d,
                    0,
                    StepTiming(
                        ts=t + d,
                        host=f"h{r // 8}",
                        job_id=JOB,
                        rank=r,
                        step=step,
                        section="compute",
                        duration_seconds=d,
                    ),
                )
            )
            events.append(
                (
                    t + d,
                    1,
                    CollectiveProgress(
                        ts=t + d,
                        host=f"h{r // 8}",
                        job_id=JOB,
                        rank=r,
                        process_group="0",
                        last_enqueued=step,
                        last_started=step,
                        last_completed=step - 1,
                    ),
                )
            )
            arrive.append(t + d)
        if frozen:  # the others wait inside the all-reduce for ever; keep simulating their heartbeats
            emit_until(max(arrive) + 60.0, events)
            result.end_seconds = max(arrive) + 60.0
            result.steps_done = step
            return result
        end = max(arrive) + COMM_SECONDS
        for r in range(cfg.ranks):
            events.append(
                (
                    end,
                    2,
                    CollectiveProgress(
                        ts=end,
                        host=f"h{r // 8}",
                        job_id=JOB,
                        rank=r,
                        process_group="0",
                        last_enqueued=step,
                        last_started=step,
                        last_completed=step,
                    ),
                )
            )
        emit_until(end, events)
        t = end
    result.end_seconds = t
    result.steps_done = cfg.steps
    return result
