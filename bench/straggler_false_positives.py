"""False positives of the runtime analyzer on a healthy simulated job: target zero findings.

64 ranks x 10,000 steps of ~1 s with +-5% step-time jitter, GC-like pauses (1% of steps, one random rank,
+50-150%, holding back its heartbeat thread too), heartbeats every simulated second, one tick per second.
--jitter 0.1 makes the steps vary by +-10% instead; --step-seconds 0.1 runs the short steps of the torchrun
job (windows of 30 steps instead of the 4-step minimum).
Usage: python bench/straggler_false_positives.py [--ranks 64] [--steps 10000] [--seeds 1] [--jitter 0.05]
       [--step-seconds 1.0]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

# run as a script (python bench/...): its siblings are on sys.path
from machine_load import one_minute  # type: ignore[import-not-found]
from straggler_sim import SimConfig, run_job  # type: ignore[import-not-found]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--jitter", type=float, default=0.05)
    ap.add_argument("--step-seconds", type=float, default=1.0)
    args = ap.parse_args()
    load = one_minute()
    print(f"step jitter +-{args.jitter:.0%}, steps of {args.step_seconds:g} s, load average {load:.1f}")
    print("| seed | ranks | steps | simulated s | GC-like pauses | findings | by kind | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        cfg = SimConfig(
            ranks=args.ranks,
            steps=args.steps,
            seed=seed,
            jitter_fraction=args.jitter,
            step_seconds=args.step_seconds,
        )
        result = run_job(cfg)
        wall = time.perf_counter() - t0
        kinds = dict(Counter(f.kind for f in result.findings)) or "-"
        print(
            f"| {seed} | {args.ranks} | {result.steps_done} | {result.end_seconds:.0f} | {result.pauses} "
            f"| {len(result.findings)} | {kinds} | {wall:.1f} |"
        )


if __name__ == "__main__":
    main()
