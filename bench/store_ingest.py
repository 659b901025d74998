"""Store ingest: rows/s of fleetguard's write paths against a raw DuckDB append of the same DataFrame.

Each run writes the same gpu_samples DataFrame (every column of GpuSample filled) into a fresh DuckDB file:
  raw           duckdb `con.append("gpu_samples", df)` on a table made by the same DDL
  append_columns  fleetguard `Store.append_columns("gpu_samples", df)` (bulk path: validation + INSERT BY NAME)
  append_records  fleetguard `Store.append(records)` in agent-sized batches (the agent's path, no pandas)
Usage: python bench/store_ingest.py [--rows 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse

import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from fleetguard.records.telemetry import GpuSample
from fleetguard.store import Store
from fleetguard.store.schema import TABLES


def make_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    gpus = 8
    cols: dict[str, object] = {}
    for column in TABLES["gpu_samples"].columns:
        name = column.name
        if name == "ts":
            cols[name] = pd.to_datetime(1.7e9 + np.arange(rows) // (gpus * 64), unit="s")
        elif name == "host":
            cols[name] = pd.Series([f"host-{i % 64:03d}" for i in range(rows)], dtype="string")
        elif name == "gpu_index":
            cols[name] = np.arange(rows) % gpus
        elif column.sql_type == "VARCHAR":
            cols[name] = pd.Series([f"{name}-{i % 512}" for i in range(rows)], dtype="string")
        elif column.sql_type == "DOUBLE":
            cols[name] = rng.normal(100.0, 10.0, rows)
        elif column.sql_type == "BOOLEAN":
            cols[name] = rng.random(rows) < 0.01
        else:
            cols[name] = rng.integers(0, 1_000_000, rows)
    return pd.DataFrame(cols)


def timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def run(rows: int, repeat: int, record_batch: int, record_rows: int) -> None:
    df = make_frame(rows)
    records = [
        GpuSample(**{k: (v.timestamp() if k == "ts" else v) for k, v in zip(df.columns, row, strict=True)})
        for row in df.head(record_rows).astype(object).itertuples(index=False)
    ]
    raw_s, cols_s, rec_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            con = duckdb.connect(str(Path(tmp) / f"raw{i}.duckdb"))
            con.execute(TABLES["gpu_samples"].create_sql())
            raw_s.append(timed(lambda: con.append("gpu_samples", df)))
            assert con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0] == rows
            con.close()
            store = Store.open(Path(tmp) / f"fg{i}.duckdb")
            cols_s.append(timed(lambda: store.append_columns("gpu_samples", df)))
            assert store.counts()["gpu_samples"] == rows
            store.close()
            store = Store.open(Path(tmp) / f"rec{i}.duckdb")

            def batches() -> None:
                for start in range(0, len(records), record_batch):
                    store.append(records[start : start + record_batch])

            rec_s.append(timed(batches))
            assert store.counts()["gpu_samples"] == len(records)
            store.close()
    raw, cols, rec = (statistics.median(x) for x in (raw_s, cols_s, rec_s))
    ncols = len(df.columns)
    print(f"| path | rows | columns | median seconds | rows/s | vs raw |")
    print("|---|---|---|---|---|---|")
    print(f"| raw DuckDB `append` (DataFrame) | {rows:,} | {ncols} | {raw:.3f} | {rows / raw:,.0f} | 1.00 |")
    print(
        f"| fleetguard `append_columns` (DataFrame) | {rows:,} | {ncols} | {cols:.3f} | {rows / cols:,.0f} "
        f"| {raw / cols:.2f} |"
    )
    print(
        f"| fleetguard `append` (records, batches of {record_batch:,}) | {len(records):,} | {ncols} | "
        f"{rec:.3f} | {len(records) / rec:,.0f} | {(len(records) / rec) / (rows / raw):.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--record-batch", type=int, default=5_000)
    parser.add_argument("--record-rows", type=int, default=200_000)
    args = parser.parse_args()
    run(args.rows, args.repeat, args.record_batch, args.record_rows)


if __name__ == "__main__":
    main()
