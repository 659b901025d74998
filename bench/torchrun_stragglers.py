"""Straggler detection on a real torchrun job (4 CPU ranks, gloo, 0.1 s steps): how soon a 1.3x slower rank
is named, and how many findings healthy jobs raise (steady steps, and steps varying +-10% per rank and step).

Target (issue 21): a 1.3x rank flagged within 10 s of its slowdown; 0 findings over 3-minute healthy runs. The
slowdown starts either with the job's first step (the window has to be sized and filled first) or in the
middle of a warmed-up run (step 300). Detected = slowdown to the finding reaching the runtime service's sink.
Usage: python bench/torchrun_stragglers.py [--repeats 3] [--healthy-seconds 180]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine_load import LoadWindow  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

from tests.runtime.torchrun_job import run_fault, run_healthy

OWN_LOAD = (
    4.0  # four busy-looping ranks would be 4; sleeping ranks are far less, so this marks only real contention
)


def detection_rows(repeats: int) -> None:
    print("| slowdown | step jitter | finding (rank) | detected s (target 10) | load before -> after |")
    print("|---|---|---|---|---|")
    for label, from_step, jitter in (
        ("1.3x rank 3 from its first step", 0, 0.0),
        ("1.3x rank 3 from step 300", 300, 0.0),
        ("1.3x rank 3 from step 300", 300, 0.1),
    ):
        for _ in range(repeats):
            load = LoadWindow(own_load=OWN_LOAD)
            with tempfile.TemporaryDirectory(prefix="fg-bench-") as tmp:
                r = run_fault(
                    Path(tmp),
                    "slow",
                    3,
                    slow_from_step=from_step,
                    step_jitter=jitter,
                    finding_kinds=("straggler",),
                )
            named = r.finding.rank if r.finding.rank is not None else r.finding.summary
            print(
                f"| {label} | +-{jitter:.0%} | {r.finding.kind} ({named}) | {r.detected_seconds:.2f} | "
                f"{load.close().cell()} |",
                flush=True,
            )


def false_positive_rows(seconds: float) -> None:
    print()
    print("| healthy job | seconds | steps | findings | by kind | load before -> after |")
    print("|---|---|---|---|---|---|")
    for jitter in (0.0, 0.1):
        load = LoadWindow(own_load=OWN_LOAD)
        with tempfile.TemporaryDirectory(prefix="fg-bench-") as tmp:
            findings, steps = run_healthy(Path(tmp), seconds, step_jitter=jitter)
        kinds = dict(Counter(f.kind for f in findings)) or "-"
        print(
            f"| step jitter +-{jitter:.0%} | {seconds:.0f} | {steps} | {len(findings)} | {kinds} | "
            f"{load.close().cell()} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--healthy-seconds", type=float, default=180.0)
    args = ap.parse_args()
    detection_rows(args.repeats)
    false_positive_rows(args.healthy_seconds)


if __name__ == "__main__":
    main()
