"""Scale benchmark of the predictor: feature build + training on simulated histories stored as Parquet.

For each size: generate the history (hourly samples, 30 days per GPU, written in chunks), then in separate
processes (so each peak RSS is its own) time (1) the floor: a plain DuckDB aggregate scan of the same
Parquet, (2) the feature build (the dataset SQL, materialised), (3) training an XGBoost on the labelled
instances (all positives + sampled negatives). DuckDB runs with 2 threads.

    .venv/bin/python bench/predictor_scale.py --rows 10e6 30e6 100e6 [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb

from fleetguard.predict.simulated_history import SAMPLE_COLUMNS, HistorySpec, write_parquet

STEPS = 24 * 30


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _connect(work: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET memory_limit = '12GB'")
    con.execute(f"SET temp_directory = '{work / 'duckdb_tmp'}'")
    return con


def phase_floor(data: Path, work: Path) -> dict[str, float]:
    con = _connect(work)
    sums = ", ".join(f"sum({c})" for c in SAMPLE_COLUMNS)
    t = time.perf_counter()
    con.execute(
        f"SELECT count(*), count(DISTINCT device_id), {sums} FROM read_parquet('{data}/samples/*.parquet')"
    )
    con.fetchall()
    return {"wall_s": time.perf_counter() - t, "rss_mib": _rss_mib()}


def phase_build(data: Path, work: Path) -> dict[str, float]:
    from fleetguard.predict.contract import register_inputs
    from predictor.dataset import DatasetSpec, build_instances

    con = _connect(work)
    t = time.perf_counter()
    inputs = register_inputs(con, data / "samples", data / "failures.parquet")
    build_instances(con, inputs.feature_columns, DatasetSpec(), ())
    n = con.execute("SELECT count(*) FROM fg_instances").fetchone()
    return {"wall_s": time.perf_counter() - t, "rss_mib": _rss_mib(), "instances": float(n[0] if n else 0)}


def phase_train(data: Path, work: Path) -> dict[str, float]:
    """Build, then read the labelled instances (all positives + 200k negatives) and fit XGBoost."""
    from fleetguard.predict.contract import register_inputs
    from predictor.dataset import DatasetSpec, build_instances, fetch_instances
    from predictor.members import make_single as make_model

    con = _connect(work)
    inputs = register_inputs(con, data / "samples", data / "failures.parquet")
    names = build_instances(con, inputs.feature_columns, DatasetSpec(), ())
    t = time.perf_counter()
    con.execute(
        "CREATE TEMP TABLE fg_train AS SELECT * FROM fg_instances WHERE label = 1 "
        "UNION ALL (SELECT * FROM fg_instances WHERE label = 0 USING SAMPLE 200000 ROWS (reservoir, 0))"
    )
    inst = fetch_instances(con, names, table="fg_train")
    model = make_model("xgboost", n_jobs=2)
    model.fit(inst.x, inst.label, seed=0)
    return {"wall_s": time.perf_counter() - t, "rss_mib": _rss_mib(), "train_rows": float(len(inst))}


PHASES = {"floor": phase_floor, "build": phase_build, "train": phase_train}


def run_phase(name: str, data: Path, work: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--phase", name, "--data", str(data), "--work", str(work)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, nargs="*", default=[10e6])
    ap.add_argument("--work", type=Path, default=Path("/tmp/fleetguard-scale"))
    ap.add_argument("--phase", choices=sorted(PHASES))
    ap.add_argument("--data", type=Path)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args.data, args.work)))
        return
    print(
        "| sample rows | GPUs | generate s | floor scan s | feature build s | build / floor "
        "| build RSS MiB | instances | train s (XGBoost) | train RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rows in args.rows:
        n_gpus = int(rows // STEPS)
        data = args.work / f"h{int(rows / 1e6)}M"
        t = time.perf_counter()
        if not (data / "failures.parquet").exists():
            write_parquet(HistorySpec(n_gpus=n_gpus, n_steps=STEPS, seed=1), data)
        gen = time.perf_counter() - t
        floor = run_phase("floor", data, args.work)
        build = run_phase("build", data, args.work)
        train = run_phase("train", data, args.work)
        print(
            f"| {rows / 1e6:g}M | {n_gpus} | {gen:.1f} | {floor['wall_s']:.1f} | {build['wall_s']:.1f} | "
            f"{build['wall_s'] / floor['wall_s']:.1f}x | {build['rss_mib']:.0f} | "
            f"{int(build['instances'])} | "
            f"{train['wall_s']:.1f} | {train['rss_mib']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
