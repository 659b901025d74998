"""Store ingest: rows/s of fleetguard's write paths against a raw DuckDB append of the same DataFrame.

For a wide table (gpu_samples, 42 columns) and a narrow one (nic_counters, 10 columns), each repeat writes the
same DataFrame into fresh DuckDB files, in the same run:
  raw             duckdb `con.append(table, df)` on a table made by the same DDL
  append_columns  fleetguard `Store.append_columns(table, df)` (bulk path: validation + INSERT by name)
  append          fleetguard `Store.append(records)` in agent-sized batches (the agent's path, no pandas)
Usage: python bench/store_ingest.py [--rows 2000000] [--repeat 3] [--record-rows 200000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from fleetguard.store import Store
from fleetguard.store.schema import TABLES, Table


def make_frame(table: Table, rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cols: dict[str, object] = {}
    for column in table.columns:
        name = column.name
        if column.is_timestamp:
            cols[name] = pd.to_datetime(1.7e9 + np.arange(rows) // 512, unit="s")
        elif name == "host":
            cols[name] = pd.Series([f"host-{i % 64:03d}" for i in range(rows)], dtype="string")
        elif column.sql_type == "VARCHAR":
            cols[name] = pd.Series([f"{name}-{i % 80}" for i in range(rows)], dtype="string")
        elif column.sql_type == "DOUBLE":
            cols[name] = rng.normal(100.0, 10.0, rows)
        elif column.sql_type == "BOOLEAN":
            cols[name] = rng.random(rows) < 0.01
        else:
            cols[name] = rng.integers(0, 1_000_000, rows)
    return pd.DataFrame(cols)


def records_from(table: Table, df: pd.DataFrame) -> list[object]:
    out = []
    for row in df.astype(object).itertuples(index=False):
        values = {
            c.name: (v.timestamp() if c.is_timestamp else v) for c, v in zip(table.columns, row, strict=True)
        }
        out.append(table.record(**values))
    return out


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_table(name: str, rows: int, repeat: int, record_rows: int, record_batch: int, tmp: Path) -> None:
    table = TABLES[name]
    df = make_frame(table, rows)
    records = records_from(table, df.head(record_rows))
    raw_s, cols_s, rec_s = [], [], []
    for i in range(repeat):
        con = duckdb.connect(str(tmp / f"{name}-raw{i}.duckdb"))
        con.execute(table.create_sql())
        raw_s.append(timed(lambda con=con: con.append(name, df)))  # type: ignore[misc]
        assert con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0] == rows
        con.close()
        with Store.open(tmp / f"{name}-cols{i}.duckdb") as store:
            cols_s.append(timed(lambda store=store: store.append_columns(name, df)))  # type: ignore[misc]
            assert store.counts()[name] == rows
        with Store.open(tmp / f"{name}-rec{i}.duckdb") as store:

            def batches(store: Store = store) -> None:
                for start in range(0, len(records), record_batch):
                    store.append(records[start : start + record_batch])

            rec_s.append(timed(batches))
            assert store.counts()[name] == len(records)
    raw, cols, rec = (statistics.median(x) for x in (raw_s, cols_s, rec_s))
    n = len(table.columns)
    raw_rate = rows / raw
    print(
        f"| {name} | raw DuckDB `append` (DataFrame) | {rows:,} | {n} | {raw:.3f} | {raw_rate:,.0f} | 1.00 |"
    )
    print(
        f"| {name} | fleetguard `append_columns` (DataFrame) | {rows:,} | {n} | {cols:.3f} "
        f"| {rows / cols:,.0f} | {raw / cols:.2f} |"
    )
    rec_rate = len(records) / rec
    print(
        f"| {name} | fleetguard `append` (records, batches of {record_batch:,}) | {len(records):,} | {n} "
        f"| {rec:.3f} | {rec_rate:,.0f} | {rec_rate / raw_rate:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--record-rows", type=int, default=200_000)
    parser.add_argument("--record-batch", type=int, default=5_000)
    parser.add_argument("--tables", default="nic_counters,gpu_samples")
    args = parser.parse_args()
    print("| table | path | rows | columns | median seconds | rows/s | vs raw |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tables.split(","):
            bench_table(name, args.rows, args.repeat, args.record_rows, args.record_batch, Path(tmp))


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
