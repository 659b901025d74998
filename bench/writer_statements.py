"""What one writer-lane commit costs, statement by statement: `IngestWriter.commit_group` over groups of
bench/controller_load.py's steady-state batch, on a lane cursor wrapped to time each call (thread CPU; the
rest of a commit is the writer's Python: staging, `columns.concat`, the ledger and hosts in memory).

Usage: python bench/writer_statements.py [--batches-per-group 20] [--groups 40]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.controller_load import template
from bench.machine_load import LoadWindow
from fleetguard.clock import SystemClock
from fleetguard.controller.ingest import IngestWriter, Pending
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import IngestBatch, parse_batch
from fleetguard.store import Store


class TimedCursor:
    """A DuckDB cursor whose execute/register/unregister add their thread CPU to `spent`, by statement."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.spent: dict[str, float] = {}

    def _timed(self, key: str, call: Callable[..., Any], *args: Any) -> Any:
        t0 = time.thread_time()
        try:
            return call(*args)
        finally:
            self.spent[key] = self.spent.get(key, 0.0) + time.thread_time() - t0

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed(" ".join(sql.split()[:3])[:40], self.cursor.execute, sql, *args)

    def register(self, *args: Any) -> Any:
        return self._timed("register a view", self.cursor.register, *args)

    def unregister(self, *args: Any) -> Any:
        return self._timed("unregister a view", self.cursor.unregister, *args)

    def close(self) -> None:
        self.cursor.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches-per-group", type=int, default=20)
    parser.add_argument("--groups", type=int, default=40)
    args = parser.parse_args()
    window = LoadWindow()
    text, _rows = template(5)
    parsed: list[IngestBatch] = [
        parse_batch(
            gzip.compress(
                text.replace("HOSTNAME", f"h{i}")
                .replace("SEQNUM", "1")
                .replace("SENTTS", "1795000000.0")
                .encode(),
                1,
            ),
            f"h{i}",
        )
        for i in range(args.batches_per_group)
    ]
    root = Path(tempfile.mkdtemp(prefix="fg-writer-statements-"))
    try:
        with Store.open(root / "s.duckdb") as store:
            store.connection.execute("SET checkpoint_threshold = '256MB'")
            writer = IngestWriter(store, SystemClock(), ControllerStats())
            cursor = TimedCursor(store.cursor())
            seq = 0

            def commit(groups: int) -> None:
                nonlocal seq
                for _ in range(groups):
                    group = []
                    for b in parsed:
                        seq += 1
                        b.seq = seq
                        group.append(Pending(b, 0.0))
                    writer.commit_group(group, cursor)  # type: ignore[arg-type]

            commit(5)  # warm: first inserts, hosts seen for the first time
            cursor.spent.clear()
            t0 = time.thread_time()
            commit(args.groups)
            total = (time.thread_time() - t0) / args.groups * 1000
            cursor.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    statements = sum(cursor.spent.values()) / args.groups * 1000
    print(
        f"a commit of {args.batches_per_group} batches: {total:.2f} ms thread CPU "
        f"({total / args.batches_per_group:.2f} per batch); load {window.close().cell()}"
    )
    print("| call | ms per commit |\n|---|---:|")
    for key, spent in sorted(cursor.spent.items(), key=lambda kv: -kv[1]):
        print(f"| {key} | {spent / args.groups * 1000:.2f} |")
    print(f"| the writer's Python (the rest) | {total - statements:.2f} |")


if __name__ == "__main__":
    main()
