"""Wall time of `policy replay` over a simulated month: 30 days x 256 hosts x 8 GPUs, with faults.

Writes the history (fleetguard.incidents.simulated_history: GPU samples every 30 min, XIDs, storms, IB
counter faults) into a fresh store, then times the replay exactly as `fleetguard policy replay` runs it
(store reads in 6-hour chunks, 60-second rounds), once per policy.
Usage: python bench/diagnosis_replay.py [--hosts 256] [--days 30] [--dir DIR (reuse the history there)]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from diagnosis.replay import replay
from fleetguard.incidents.replay_source import history_rounds, history_span
from fleetguard.incidents.simulated_history import history
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--dir", default=None, help="keep the history here (reused when it is already there)")
    args = ap.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="fg-replay-"))
    path = folder / "history.duckdb"
    t0 = time.perf_counter()
    fresh = not path.exists()  # --dir with a history.duckdb from an earlier run: reused as it is
    with Store.open(path) as store:
        if fresh:
            for day in history(args.hosts, args.days, seed=1):
                store.append(day)
        rows = store.counts()
    write_seconds = time.perf_counter() - t0
    print(
        f"history: {sum(rows.values()):,} rows ({rows['gpu_samples']:,} GPU samples, "
        f"{rows['events']:,} events, {rows['nic_counters']:,} counter rows) written in {write_seconds:.1f} s"
    )
    print("| policy | days x hosts | rows | rounds | incidents | actions | alerts | wall s | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    policies = {
        "shipped": load_policy(),
        "strict (symbol_error warn 1000/s)": load_policy(
            overrides={
                "counters": {"symbol_error": {"warn_rate_per_second": 1000, "critical_rate_per_second": 5000}}
            }
        ),
    }
    with Store.open(path, read_only=True) as store:
        span = history_span(store.connection)
        assert span is not None
        for name, policy in policies.items():
            w0, c0 = time.perf_counter(), time.process_time()
            report = replay(
                policy, history_rounds(store.connection, span[0], span[1] + 60, 60.0), span[1] + 60
            )
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            summary = report.summary()
            print(
                f"| {name} | {args.days} x {args.hosts} | {sum(rows.values()):,} | {report.rounds:,} "
                f"| {summary['incidents']:,} | {len(report.actions):,} | {len(report.alerts):,} "
                f"| {wall:.1f} | {cpu:.1f} |"
            )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
