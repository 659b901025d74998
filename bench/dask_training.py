"""Training time and peak memory: single process vs xgboost.dask on a LocalCluster, same simulated history.

Writes a simulate-history dataset (--gpus, --days; hourly samples), then in fresh subprocesses:
  single: predictor.training.train_from_views (the `fleetguard train --model xgboost` path)
  dask:   fleetguard.predict.dask_training.train_on_dask on a LocalCluster of --workers one-thread worker
          processes (the `fleetguard train --dask local` path)
and reports wall time, the peak RSS of the single process, of the Dask client and of each worker (each
worker's own ru_maxrss, read on the worker), the training rows and the two models' train PR-AUC.

Usage: python bench/dask_training.py [--gpus 2000] [--days 60] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _open(samples: str, failures: str) -> tuple[object, object, object, float]:
    import duckdb

    from fleetguard.predict.contract import register_inputs
    from fleetguard.predict.settings import resolve
    from predictor.dataset import data_end_ts

    con = duckdb.connect()
    inputs = register_inputs(con, Path(samples), Path(failures))
    spec, _ = resolve(con, None, None, None, None, None, quiet=True)
    return con, inputs, spec, data_end_ts(con)


def run_single(samples: str, failures: str) -> dict[str, object]:
    from predictor.training import train_from_views

    t0 = time.monotonic()
    con, inputs, spec, end = _open(samples, failures)
    trained = train_from_views(
        con,  # type: ignore[arg-type]
        inputs.feature_columns,  # type: ignore[attr-defined]
        "xgboost",
        spec,  # type: ignore[arg-type]
        end,
        None,
        0,
        categorical_columns=inputs.categorical_columns,  # type: ignore[attr-defined]
    )
    return {
        "seconds": time.monotonic() - t0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rows": trained.rows,
        "train_pr_auc": trained.train_pr_auc,
    }


def _worker_peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_dask(samples: str, failures: str, workers: int) -> dict[str, object]:
    from distributed import Client, LocalCluster

    from fleetguard.predict.dask_dataset import SourceFiles
    from fleetguard.predict.dask_training import Inputs, train_on_dask

    t0 = time.monotonic()
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as cluster,
        Client(cluster) as client,
    ):
        started = time.monotonic() - t0
        con, inputs, spec, end = _open(samples, failures)
        trained = train_on_dask(
            client,
            con,  # type: ignore[arg-type]
            Inputs(
                SourceFiles(samples, failures, None),
                inputs.feature_columns,  # type: ignore[attr-defined]
                inputs.categorical_columns,  # type: ignore[attr-defined]
            ),
            spec,  # type: ignore[arg-type]
            end,
            None,
            0,
        )
        seconds = time.monotonic() - t0
        peaks = sorted(client.run(_worker_peak).values())
    return {
        "seconds": seconds,
        "cluster_start_seconds": started,
        "client_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": peaks,
        "rows": trained.rows,
        "train_pr_auc": trained.train_pr_auc,
    }


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] in ("--single", "--dask"):
        samples, failures = sys.argv[2], sys.argv[3]
        if sys.argv[1] == "--single":
            out = run_single(samples, failures)
        else:
            out = run_dask(samples, failures, int(sys.argv[4]))
        print(json.dumps(out))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=2000)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    from fleetguard.predict.simulated_history import HistorySpec, write_parquet

    with tempfile.TemporaryDirectory(prefix="fg-dask-bench-") as tmp:
        samples_file, failures_file, rows = write_parquet(
            HistorySpec(n_gpus=args.gpus, n_steps=24 * args.days, seed=0), Path(tmp), gpus_per_chunk=250
        )
        print(f"{rows} samples ({args.gpus} GPUs x {args.days} days, hourly)", flush=True)
        results = {}
        for mode, extra in (("single", []), ("dask", [str(args.workers)])):
            proc = subprocess.run(
                [sys.executable, __file__, f"--{mode}", str(samples_file), str(failures_file), *extra],
                capture_output=True,
                text=True,
                check=True,
            )
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        single, dask = results["single"], results["dask"]
        print("| path | training rows | wall s | peak RSS MB | train PR-AUC |")
        print("|---|---:|---:|---:|---:|")
        print(
            f"| single process | {single['rows']} | {single['seconds']:.1f} | {single['peak_rss_mb']:.0f} "
            f"| {single['train_pr_auc']:.3f} |"
        )
        workers = " / ".join(f"{p:.0f}" for p in dask["worker_peak_rss_mb"])
        print(
            f"| xgboost.dask, {args.workers} workers | {dask['rows']} | {dask['seconds']:.1f} "
            f"(cluster start {dask['cluster_start_seconds']:.1f}) | client {dask['client_peak_rss_mb']:.0f}, "
            f"workers {workers} | {dask['train_pr_auc']:.3f} |"
        )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
