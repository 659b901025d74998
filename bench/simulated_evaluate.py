"""The predictor's causal backtest on `fleetguard simulate-history` data (a fleet change half way: a new
batch, a driver update, another mix of failure patterns), where sliding retraining should beat a model
trained once.

Writes the history (Parquet) under --work unless it is there, derives the settings as `fleetguard evaluate`
does, runs the backtest once and prints markdown tables for K = 5, 10, 20 per day.

    .venv/bin/python bench/simulated_evaluate.py [--gpus 500] [--days 120] [--seed 1] [--work DIR]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetguard.predict.contract import register_inputs
from fleetguard.predict.settings import resolve
from fleetguard.predict.simulated_history import HistorySpec, write_parquet
from fleetguard.predict.tables import markdown_table
from fleetguard.predict.warning_count import counted_warnings
from predictor.backtest import BacktestConfig, retrain_summary, run_backtest, summarise
from predictor.dataset import (
    build_instances,
    candidate_categories,
    candidate_event_kinds,
    data_end_ts,
    fetch_events,
    fetch_failures,
    fetch_instances,
)
from predictor.durations import format_duration
from predictor.registry import ALL_MODELS
from predictor.sliding_ensemble import kept_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=500)
    ap.add_argument("--days", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/fleetguard-simulated"))
    ap.add_argument("--models", default=",".join(ALL_MODELS), help="as bench/backblaze_evaluate.py --models")
    ap.add_argument("--pick-train-window", default="", help="comma list of L_train candidates in days")
    ap.add_argument("--no-calibrate", action="store_true", help="skip the per-retrain calibration")
    args = ap.parse_args()
    work = args.work / f"g{args.gpus}-d{args.days}-s{args.seed}"
    t0 = time.perf_counter()
    if not (work / "failures.parquet").exists():
        write_parquet(HistorySpec(n_gpus=args.gpus, n_steps=24 * args.days, seed=args.seed), work)
    t_gen = time.perf_counter() - t0
    con = duckdb.connect()
    inputs = register_inputs(con, work / "samples", work / "failures.parquet")
    spec, settings = resolve(con, None, None, None, None, None, quiet=True)
    t1 = time.perf_counter()
    kinds = candidate_event_kinds(con)
    categories = candidate_categories(con, inputs.categorical_columns)
    names = build_instances(con, inputs.feature_columns, spec, kinds, categories=categories)
    inst = fetch_instances(con, names)
    f_dev, f_ts = fetch_failures(con)
    events = fetch_events(con, kinds)
    end = data_end_ts(con)
    t_build = time.perf_counter() - t1
    config = BacktestConfig(
        horizon_seconds=settings.horizon,
        train_window_seconds=settings.train_window,
        retrain_every_seconds=settings.retrain_every,
        step_seconds=spec.step_seconds,
        candidate_event_kinds=kinds,
        candidate_categories=categories,
        models=tuple(m for m in args.models.split(",") if m),
        train_window_candidates=tuple(float(d) * 86400.0 for d in args.pick_train_window.split(",") if d),
        calibrate=not args.no_calibrate,
    )
    t2 = time.perf_counter()
    with counted_warnings(quiet=False):
        result = run_backtest(inst, f_dev, f_ts, end, config, events=events)
    t_bt = time.perf_counter() - t2
    starts = result.scored.period_starts
    print(
        f"simulate-history --gpus {args.gpus} --days {args.days} --seed {args.seed}: {len(inst)} instances, "
        f"{len(names)} features, {len(f_ts)} failures; scored {len(starts)} days; derived H "
        f"{format_duration(settings.horizon)}, L_train {format_duration(settings.train_window)}, "
        f"retrain every {format_duration(settings.retrain_every)}, W {format_duration(spec.window_seconds)}"
    )
    print(
        f"times: generate {t_gen:.1f}s, features {t_build:.1f}s, backtest {t_bt:.1f}s; "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    if result.kept_members:
        print(kept_summary(result.kept_members))
    print(retrain_summary("sliding retrains", result.retrains))
    if result.grow_retrains:
        print(retrain_summary("xgboost_grow_avg retrains", result.grow_retrains))
    picked = sorted({r.train_window_seconds for r in result.retrains})
    print("L_train used: " + ", ".join(format_duration(w) for w in picked))
    for k in (5, 10, 20):
        print(f"\n### K = {k} per day\n")
        print(markdown_table(summarise(result, k)))


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
