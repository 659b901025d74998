"""What one build of the dashboard's fleet model costs the controller's interpreter, step by step.

The dashboard runs in the controller's process, and its keeper builds the fleet model (every GPU and port with
its health) every refresh period while someone watches (`dashboard/snapshot.py`): that build shares the one
interpreter with the ingest handlers. This builds the model over a bench store (bench/dashboard_store.py),
`--runs` times after `--warmup`, and prints the median thread CPU of the whole build and of each step (the
store's queries and the pure views): the thread's CPU moves far less with a shared machine's load than the
wall does. Compare two trees by running this from each (`PYTHONPATH=TREE`), alternated.

Usage: python bench/dashboard_model_build.py --store /tmp/fg-dbench-s11/dbench.duckdb [--runs 7] [--warmup 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard.snapshot as snapshot

STEPS = (
    "health_inputs",
    "latest_gpu_states",
    "event_counts",
    "risk_by_device",
    "port_states",
    "port_counters",
    "gpu_views",
    "port_views",
    "host_views",
)


def timed(cpu: defaultdict[str, list[float]]) -> None:
    """Wrap each step the model build calls (as `dashboard.snapshot` names it) to add up its thread CPU."""
    for name in STEPS:
        step = getattr(snapshot, name)

        def wrapper(*args: Any, _step: Callable[..., Any] = step, _name: str = name, **kw: Any) -> Any:
            started = time.thread_time()
            try:
                return _step(*args, **kw)
            finally:
                cpu[_name].append(time.thread_time() - started)

        setattr(snapshot, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--store", required=True, help="a store made by bench/dashboard_store.py")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    cpu: defaultdict[str, list[float]] = defaultdict(list)
    timed(cpu)
    con = duckdb.connect(args.store, read_only=True)
    try:
        row = con.execute("SELECT epoch(max(ts)) FROM gpu_samples").fetchone()
        now = float(row[0]) if row and row[0] is not None else time.time()
        builds: list[float] = []
        walls: list[float] = []
        gpus = 0
        for run in range(args.warmup + args.runs):
            if run == args.warmup:
                cpu.clear()
            cur = con.cursor()
            started, started_cpu = time.perf_counter(), time.thread_time()
            model = snapshot.build_fleet_model(cur, now, 0.5)
            if run >= args.warmup:
                builds.append(time.thread_time() - started_cpu)
                walls.append(time.perf_counter() - started)
            gpus = len(model.gpus)
            cur.close()
    finally:
        con.close()
    print(f"| step ({gpus:,} GPUs, median of {args.runs}) | thread CPU ms |")
    print("|---|---:|")
    whole, wall = statistics.median(builds) * 1000, statistics.median(walls) * 1000
    print(f"| the whole build | {whole:.0f} (wall {wall:.0f}) |")
    for name in STEPS:
        print(f"| {name} | {statistics.median(cpu[name]) * 1000:.1f} |")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script

    measured(main)
