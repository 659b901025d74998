"""Where a diagnosis round's time goes: the rounds of bench/diagnosis_round.py (the same fleet, the same real
store and the controller's `IncidentTask`), with the round's main steps timed by wrappers around them and the
pacer's rests left out: each step's wall time, and the CPU time of the thread that ran it (the Python the
step ran under the interpreter's lock, and DuckDB's work on that thread; not DuckDB's other threads). On a
shared machine the thread's CPU moves far less than the wall.

The steps nest: `rules.observations` holds `rules._take_steady`, `rules._keep_steady`, `rules._gpu_rows`
and `rules._port_rows`; `feed.read` holds `feed._gpu_split`, `feed._counters` and `feed._rows`. Compare two
trees by running this from each (`PYTHONPATH=TREE`), alternated: the machine's drift is larger than most
differences between them.

Usage: python bench/diagnosis_round_phases.py [--hosts 2048] [--seconds-per-round 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from diagnosis_round import commit, round_columns  # type: ignore[import-not-found]  # a sibling script

import diagnosis.rules as rules_module
import fleetguard.incidents.feed as feed_module
import fleetguard.incidents.incident_store as incident_store_module
from fleetguard.config import load_config
from fleetguard.controller.process import collect_less
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store

STEPS: tuple[tuple[Any, str, str], ...] = (
    (feed_module.StoreFeed, "read", "feed.read"),
    (feed_module.StoreFeed, "_gpu_split", "feed._gpu_split"),
    (feed_module.StoreFeed, "_counters", "feed._counters"),
    (feed_module.StoreFeed, "_rows", "feed._rows"),
    (rules_module.Rules, "observations", "rules.observations"),
    (rules_module.Rules, "_take_steady", "rules._take_steady"),
    (rules_module.Rules, "_keep_steady", "rules._keep_steady"),
    (rules_module.Rules, "_gpu_rows", "rules._gpu_rows"),
    (rules_module.Rules, "_port_rows", "rules._port_rows"),
    (incident_store_module.IncidentStore, "persist", "store.persist"),
)


def timed(spent: defaultdict[str, float], cpu: defaultdict[str, float]) -> None:
    """Wrap each step present in this tree (an older tree may lack one) so that its wall and thread CPU
    times add up."""
    for owner, name, label in STEPS:
        step = getattr(owner, name, None)
        if step is None:
            continue

        def wrapper(*args: Any, _step: Callable[..., Any] = step, _label: str = label, **kw: Any) -> Any:
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                return _step(*args, **kw)
            finally:
                spent[_label] += time.perf_counter() - started
                cpu[_label] += time.thread_time() - started_cpu

        setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=2048)
    ap.add_argument("--seconds-per-round", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    spent: defaultdict[str, float] = defaultdict(float)
    cpu: defaultdict[str, float] = defaultdict(float)
    timed(spent, cpu)
    folder = Path(tempfile.mkdtemp(prefix="fg-phases-"))
    try:
        config = load_config(overrides={"store.path": str(folder / "round.duckdb")})
        task = IncidentTask(config)
        task.policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
        task.pacer.rest = lambda: None  # type: ignore[method-assign]  # the step's own time, no rests
        rng = random.Random(0)
        collect_less()  # as the controller process runs
        t0 = 1_700_000_000.0
        walls: list[float] = []
        cpus: list[float] = []
        with Store.open(folder / "round.duckdb") as store:
            for r in range(args.warmup + args.rounds):
                now = t0
                for second in range(args.seconds_per_round):
                    now = t0 + r * args.seconds_per_round + second
                    commit(store, round_columns(args.hosts, now, rng))
                if r == args.warmup:
                    spent.clear()
                    cpu.clear()
                started, started_cpu = time.perf_counter(), time.thread_time()
                with store.transaction() as con:
                    task(con, now)
                if r >= args.warmup:
                    walls.append(time.perf_counter() - started)
                    cpus.append(time.thread_time() - started_cpu)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    n = len(walls)
    step = f"step ({args.hosts:,} hosts, {args.seconds_per_round} s a round)"
    print(f"| {step} | wall ms a round | thread CPU ms |")
    print("|---|---:|---:|")
    print(f"| the whole round (mean of {n}) | {sum(walls) / n * 1000:.0f} | {sum(cpus) / n * 1000:.0f} |")
    for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {seconds / n * 1000:.1f} | {cpu[label] / n * 1000:.1f} |")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script

    measured(main)
