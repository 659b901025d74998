"""False positives of the runtime analyzer on a healthy simulated job: target zero findings.

64 ranks x 10,000 steps of ~1 s with +-5% step-time jitter, GC-like pauses (1% of steps, one random rank,
+50-150%, holding back its heartbeat thread too), heartbeats every simulated second, one tick per second.
Usage: python bench/straggler_false_positives.py [--ranks 64] [--steps 10000] [--seeds 1]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from straggler_sim import SimConfig, run_job  # type: ignore[import-not-found]  # run as a script (python bench/...): its sibling is on sys.path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args()
    print("| seed | ranks | steps | simulated s | GC-like pauses | findings | by kind | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        result = run_job(SimConfig(ranks=args.ranks, steps=args.steps, seed=seed))
        wall = time.perf_counter() - t0
        kinds = dict(Counter(f.kind for f in result.findings)) or "-"
        print(
            f"| {seed} | {args.ranks} | {result.steps_done} | {result.end_seconds:.0f} | {result.pauses} "
            f"| {len(result.findings)} | {kinds} | {wall:.1f} |"
        )


if __name__ == "__main__":
    main()
