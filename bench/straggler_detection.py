"""Detection latency in simulated time: a 1.3x slower rank (target < 30 s at ~1 step/s), a frozen rank
(SIGSTOP-like: hung and localised, target < 15 s with 1 s heartbeats) and a dead rank (PID exit).

The simulated job is the one of bench/straggler_sim.py (64 ranks, 5% jitter, GC-like pauses that also hold
back heartbeats); the fault starts at a different time for each seed, after the timeouts have been learned.
Usage: python bench/straggler_detection.py [--ranks 64] [--seeds 5]
"""

from __future__ import annotations

import argparse
import math
import statistics

from straggler_sim import JOB, SimConfig, run_job  # type: ignore[import-not-found]  # run as a script (python bench/...): its sibling is on sys.path

from straggler.analysis import RuntimeAnalyzer


def straggler_latency(ranks: int, seed: int) -> tuple[float, bool]:
    onset = 200.0 + 13.7 * seed
    cfg = SimConfig(ranks=ranks, steps=400, slow_rank=seed % ranks, slow_from_seconds=onset, seed=seed)
    found = [f for f in run_job(cfg).findings if f.kind == "straggler"]
    if not found:
        return math.inf, False
    return found[0].ts - onset, all(f.rank == cfg.slow_rank for f in found)


def hang_latency(ranks: int, seed: int) -> tuple[float, float, bool]:
    freeze = 200.0 + 13.7 * seed
    rank = (7 * seed + 3) % ranks
    cfg = SimConfig(ranks=ranks, steps=1000, freeze_rank=rank, freeze_at_seconds=freeze, seed=seed)
    findings = run_job(cfg).findings
    hung = [f for f in findings if f.kind == "hung_rank" and f.rank == rank]
    localised = [f for f in findings if f.kind == "hang_localised"]
    if not hung or not localised:
        return math.inf, math.inf, False
    return hung[0].ts - freeze, localised[0].ts - freeze, localised[0].rank == rank


def dead_latency(ranks: int, seed: int) -> float:
    a = RuntimeAnalyzer()
    result = run_job(SimConfig(ranks=ranks, steps=100, seed=seed), a)
    died = result.end_seconds + 0.1 + 0.8 * ((seed * 0.37) % 1)  # somewhere between two ticks
    a.process_exited(JOB, seed % ranks, exit_code=-9, now=died)
    tick = float(math.floor(died) + 1)
    found = [f for f in a.tick(tick) if f.kind == "dead_rank"]
    return tick - died if found else math.inf


def row(name: str, values: list[float], target: str, extra: str) -> None:
    median, worst = statistics.median(values), max(values)
    print(f"| {name} | {len(values)} | {median:.1f} | {worst:.1f} | {target} | {extra} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    seeds = range(args.seeds)
    print("| fault | runs | median s (simulated) | max s | target | right rank |")
    print("|---|---|---|---|---|---|")
    stragglers = [straggler_latency(args.ranks, s) for s in seeds]
    row(
        "1.3x slower rank -> straggler",
        [s for s, _ in stragglers],
        "< 30 s",
        f"{sum(ok for _, ok in stragglers)}/{len(stragglers)}",
    )
    hangs = [hang_latency(args.ranks, s) for s in seeds]
    row("frozen rank -> hung_rank", [h for h, _, _ in hangs], "< 15 s", "-")
    row(
        "frozen rank -> hang_localised",
        [loc for _, loc, _ in hangs],
        "< 15 s",
        f"{sum(ok for _, _, ok in hangs)}/{len(hangs)}",
    )
    row("dead PID -> dead_rank (1 s tick)", [dead_latency(args.ranks, s) for s in seeds], "< 2 s", "-")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
