"""Cost of one RuntimeAnalyzer tick over a very large job: target < 100 ms for 16,384 ranks.

Every simulated second each rank sends a heartbeat, a compute timing and its collective progress (fed
untimed, but the per-record observe cost is reported too); then one tick is timed, wall and CPU. Ticks
that close a straggler window (every few steps) do the scoring work and are reported on their own too.
Python's cyclic GC can land inside a tick (the heap holds ~10 objects per rank); --gc-freeze moves the
set-up heap out of its reach (gc.freeze(), as a long-running controller would) to show its share.
Usage: python bench/straggler_tick.py [--ranks 16384] [--ticks 60] [--warmup-steps 10] [--gc-freeze]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from straggler.analysis import RuntimeAnalyzer

JOB = "big-job"


def records(ranks: int, step: int, now: float, rng: random.Random) -> list[object]:
    out: list[object] = []
    for r in range(ranks):
        host = f"h{r // 8}"
        out.append(
            Heartbeat(
                ts=now,
                host=host,
                job_id=JOB,
                rank=r,
                local_rank=r % 8,
                world_size=ranks,
                pid=r + 1000,
                step=step,
            )
        )
        out.append(
            StepTiming(
                ts=now,
                host=host,
                job_id=JOB,
                rank=r,
                step=step,
                section="compute",
                duration_seconds=rng.uniform(0.95, 1.05),
            )
        )
        out.append(
            CollectiveProgress(
                ts=now,
                host=host,
                job_id=JOB,
                rank=r,
                process_group="0",
                last_enqueued=step,
                last_started=step,
                last_completed=step,
            )
        )
    return out


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=16_384)
    ap.add_argument("--ticks", type=int, default=60)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--gc-freeze", action="store_true")
    args = ap.parse_args()
    rng = random.Random(0)
    a = RuntimeAnalyzer()
    a.register_job(JOB, args.ranks, 0.0)
    all_ms: list[float] = []
    window_ms: list[float] = []
    cpu_ms: list[float] = []  # CPU time of the same ticks: what the tick costs when the box is shared
    observe_s = 0.0
    observed = 0
    findings = 0
    for step in range(args.warmup_steps + args.ticks):
        now = float(step + 1)
        batch = records(args.ranks, step, now, rng)
        t0 = time.perf_counter()
        for rec in batch:
            a.observe(rec, now)  # type: ignore[arg-type]
        observe_s += time.perf_counter() - t0
        observed += len(batch)
        if args.gc_freeze and step == args.warmup_steps - 1:
            gc.collect()
            gc.freeze()
        windows_before = a.stragglers.windows_evaluated
        t0, c0 = time.perf_counter(), time.thread_time()
        findings += len(a.tick(now))
        ms = (time.perf_counter() - t0) * 1e3
        cpu = (time.thread_time() - c0) * 1e3
        if step >= args.warmup_steps:
            all_ms.append(ms)
            cpu_ms.append(cpu)
            if a.stragglers.windows_evaluated > windows_before:
                window_ms.append(ms)
    gc_mode = "frozen" if args.gc_freeze else "on"
    window_p95 = pct(window_ms, 0.95) if window_ms else float("nan")
    window_median = statistics.median(window_ms) if window_ms else float("nan")
    print(
        "| ranks | gc | ticks | tick median ms | tick p95 ms | tick max ms | window ticks "
        "| window-tick median ms | window-tick p95 ms | tick CPU p95 ms | observe µs/record | findings |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.ranks} | {gc_mode} | {len(all_ms)} | {statistics.median(all_ms):.1f} "
        f"| {pct(all_ms, 0.95):.1f} | {max(all_ms):.1f} | {len(window_ms)} | {window_median:.1f} "
        f"| {window_p95:.1f} | {pct(cpu_ms, 0.95):.1f}"
        f" | {observe_s / observed * 1e6:.2f} | {findings} |"
    )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
