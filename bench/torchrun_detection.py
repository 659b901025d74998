"""Detection and recovery latency on a real torchrun job (4 CPU ranks, gloo, 1 s heartbeat, 0.1 s steps):
fault -> finding (the sink's receive time) and fault -> first training step of the restarted worker group.
Targets: crash < 2 s; hang detected and localised < 15 s; 1.3x slower rank flagged < 30 s; recovery < 60 s.
For the slow rank, recovery is counted from the finding (a slow rank never stopped training). The job runs
DistributedDataParallel and torch.optim (--trainer ddp): recovery includes their torch._dynamo import, as a
real job's does.
Usage: python bench/torchrun_detection.py [--repeats 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.runtime.torchrun_job import run_fault

SCENARIOS = [
    ("crash (SIGKILL rank 2)", "kill", 2, ("dead_rank",), 2.0),
    ("hang (SIGSTOP rank 1)", "hang", 1, ("hang_localised",), 15.0),
    ("1.3x slower rank 3", "slow", 3, ("straggler",), 30.0),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(
        "| fault | finding (rank) | detected s (target) | recovered s (target 60) | checkpoint -> resumed |"
    )
    print("|---|---|---|---|---|")
    for label, fault, rank, kinds, target in SCENARIOS:
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="fg-bench-") as tmp:
                r = run_fault(Path(tmp), fault, rank, finding_kinds=kinds, trainer="ddp")
            named = r.finding.rank if r.finding.rank is not None else r.finding.summary
            print(
                f"| {label} | {r.finding.kind} ({named}) | {r.detected_seconds:.2f} (< {target:g}) | "
                f"{r.recovered_seconds:.1f} | {r.checkpoint_before_fault} -> {r.resumed_step} |",
                flush=True,
            )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
