"""Run every benchmark that finishes in minutes, one after another, printing each one's rows.

The long ones are left to be run by hand, with the command BENCHMARKS.md shows: the Backblaze backtest
(needs ../shared/data) and the predictor scale runs (10M/100M rows, tens of minutes).
Usage: python bench/run_all.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

QUICK: dict[str, list[str]] = {
    "store_ingest": ["store_ingest.py", "--rows", "2000000", "--repeat", "3", "--record-rows", "200000"],
    "agent_cost": ["agent_cost.py", "--seconds", "60", "--warmup", "10"],
    "client_overhead": ["client_overhead.py"],
    "straggler_tick": ["straggler_tick.py", "--ranks", "16384"],
    "straggler_false_positives": ["straggler_false_positives.py", "--ranks", "64", "--steps", "10000"],
    "straggler_detection": ["straggler_detection.py"],
    "torchrun_detection": ["torchrun_detection.py"],
    "diagnosis_rules": ["diagnosis_rules.py", "--hosts", "2048", "--rounds", "20"],
    "diagnosis_alert_latency": ["diagnosis_alert_latency.py", "--events", "40", "--interval", "1"],
    "diagnosis_replay": ["diagnosis_replay.py", "--hosts", "256", "--days", "30"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=sorted(QUICK), default=None)
    args = ap.parse_args()
    failed = []
    for name in args.only or QUICK:
        argv = QUICK[name]
        print(f"\n## {name}: python bench/{' '.join(argv)}\n", flush=True)
        start = time.perf_counter()
        rc = subprocess.call([sys.executable, str(HERE / argv[0]), *argv[1:]])
        print(f"\n({name}: exit {rc}, {time.perf_counter() - start:.0f} s)", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
