"""Backblaze drive stats (2013-04-10..05-19) through the predictor's causal backtest: the real-data benchmark.

Converts the daily CSVs to the input contract (device_id = serial number, ts = the snapshot date, every
SMART column that carries data, the drive model as a text column (a categorical feature, its encoding fixed
on each training window) or one-hot over the whole data (`--model-encoding onehot`, the old converter, which
looks at the scored days to pick the models) or left out; a failure at the end of the day flagged
failure=1), then runs the `fleetguard evaluate` logic for K = 5, 10, 20 per day, horizon 7 days, sliding
windows, and prints markdown tables. Nothing is tuned on the scored days: hyperparameters are fixed up front,
and the optional L_train pick uses a validation slice before each retrain.

Data: Backblaze Hard Drive Stats (https://www.backblaze.com/b2/hard-drive-test-data.html), used with
attribution; not for sale.

    .venv/bin/python bench/backblaze_evaluate.py [--data DIR] [--work DIR] [--model-encoding E] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetguard.predict.contract import register_inputs
from fleetguard.predict.tables import markdown_table
from fleetguard.predict.warning_count import counted_warnings
from predictor.backtest import BacktestConfig, retrain_summary, run_backtest, summarise, to_json
from predictor.dataset import (
    DatasetSpec,
    build_instances,
    candidate_categories,
    data_end_ts,
    fetch_failures,
    fetch_instances,
)
from predictor.registry import ALL_MODELS
from predictor.sliding_ensemble import kept_summary

DAY = 86400.0


def convert(data: Path, work: Path, encoding: str, top_models: int = 10) -> tuple[Path, Path]:
    """Backblaze CSVs -> samples.parquet and failures.parquet in the predictor's contract."""
    work = work / encoding
    work.mkdir(parents=True, exist_ok=True)
    samples, failures = work / "samples.parquet", work / "failures.parquet"
    if samples.exists() and failures.exists():
        return samples, failures
    con = duckdb.connect()
    glob = str(data / "*.csv").replace("'", "''")
    con.execute(f"CREATE TABLE bb AS SELECT * FROM read_csv('{glob}', union_by_name = true, header = true)")
    cols = [str(r[0]) for r in con.execute("DESCRIBE bb").fetchall()]
    smart = [c for c in cols if c.startswith("smart_")]
    counts = con.execute("SELECT " + ", ".join(f'count("{c}")' for c in smart) + " FROM bb").fetchone()
    assert counts is not None
    present = [c for c, n in zip(smart, counts, strict=True) if n > 0]
    models = [
        str(r[0])
        for r in con.execute(
            "SELECT model FROM bb GROUP BY model ORDER BY count(DISTINCT serial_number) DESC LIMIT ?",
            [top_models],
        ).fetchall()
    ]
    onehot = ", ".join(
        f"CAST(model = '{m.replace(chr(39), chr(39) * 2)}' AS INTEGER) AS model_{i}"
        for i, m in enumerate(models)
    )
    model_sql = {"onehot": f", {onehot}", "category": ", model", "none": ""}[encoding]
    feats = ", ".join(f'CAST("{c}" AS DOUBLE) AS "{c}"' for c in present)
    con.execute(
        f"COPY (SELECT serial_number AS device_id, CAST(date AS TIMESTAMP) AS ts, "
        f"CAST(capacity_bytes AS DOUBLE) / 1e12 AS capacity_tb, {feats}{model_sql} "
        "FROM bb ORDER BY date, serial_number) "
        f"TO '{samples}' (FORMAT parquet)"
    )
    # failure = 1 on the drive's last day: it failed by the end of that day.
    con.execute(
        f"COPY (SELECT serial_number AS device_id, CAST(date AS TIMESTAMP) + INTERVAL 1 DAY AS ts, "
        f"'drive_failure' AS kind FROM bb WHERE failure = 1) TO '{failures}' (FORMAT parquet)"
    )
    return samples, failures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/backblaze-2013"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/fleetguard-backblaze"))
    ap.add_argument("--window-days", type=float, default=5.0, help="feature window W")
    ap.add_argument("--train-window-days", type=float, default=18.0, help="L_train")
    ap.add_argument("--retrain-every-days", type=float, default=1.0, help="Δ")
    ap.add_argument("--pick-train-window", default="", help="comma list of L_train candidates in days")
    ap.add_argument(
        "--score-censored", action="store_true", help="also score days whose 7-day outcome is cut off"
    )
    ap.add_argument("--max-negatives", type=int, default=40_000)
    ap.add_argument("--model-encoding", choices=("category", "onehot", "none"), default="category")
    ap.add_argument(
        "--models",
        default=",".join(ALL_MODELS),
        help="comma list; also the backtest-only sliding ensembles (subsets, subsets_rank, xgboost_avg, "
        "subsets_avg, xgboost_grow_avg) and their members xgboost_sub0..",
    )
    ap.add_argument(
        "--no-calibrate",
        action="store_true",
        help="skip the per-retrain calibration (three more fits per model and retrain; rankings unchanged)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    t0 = time.perf_counter()
    samples, failures = convert(args.data, args.work, args.model_encoding)
    t_convert = time.perf_counter() - t0
    con = duckdb.connect()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inputs = register_inputs(con, samples, failures)
    spec = DatasetSpec(window_seconds=args.window_days * DAY, horizon_seconds=7 * DAY, step_seconds=DAY)
    t1 = time.perf_counter()
    categories = candidate_categories(con, inputs.categorical_columns)
    names = build_instances(con, inputs.feature_columns, spec, (), categories=categories)
    inst = fetch_instances(con, names)
    f_dev, f_ts = fetch_failures(con)
    end = data_end_ts(con)
    t_build = time.perf_counter() - t1
    candidates = tuple(float(d) * DAY for d in args.pick_train_window.split(",") if d)
    config = BacktestConfig(
        horizon_seconds=7 * DAY,
        train_window_seconds=args.train_window_days * DAY,
        retrain_every_seconds=args.retrain_every_days * DAY,
        period_seconds=DAY,
        step_seconds=DAY,
        train_window_candidates=candidates,
        max_train_negatives=args.max_negatives,
        score_censored=args.score_censored,
        candidate_categories=categories,
        models=tuple(m for m in args.models.split(",") if m),
        calibrate=not args.no_calibrate,
    )
    t2 = time.perf_counter()
    with counted_warnings(quiet=False):
        result = run_backtest(inst, f_dev, f_ts, end, config)
    t_bt = time.perf_counter() - t2
    starts = result.scored.period_starts
    day = time.strftime("%Y-%m-%d", time.gmtime(starts[0]))
    last = time.strftime("%Y-%m-%d", time.gmtime(starts[-1]))
    print(
        f"Backblaze 2013: {len(inst)} instances, {len(names)} features, {len(f_ts)} failures; "
        f"scored {len(starts)} days {day}..{last}; L_train {args.train_window_days:g}d, retrain every "
        f"{args.retrain_every_days:g}d, W {args.window_days:g}d, H 7d, drive model: {args.model_encoding}"
        + (f", L_train picked from {args.pick_train_window} d" if candidates else "")
        + ("; censored days scored (unknown outcomes count as misses)" if args.score_censored else "")
    )
    print(
        f"times: convert {t_convert:.1f}s, features {t_build:.1f}s, backtest {t_bt:.1f}s; "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    if result.kept_members:
        print(kept_summary(result.kept_members))
    print(retrain_summary("sliding retrains", result.retrains))
    if result.grow_retrains:
        print(retrain_summary("xgboost_grow_avg retrains", result.grow_retrains))
    out = {}
    for k in (5, 10, 20):
        metrics = summarise(result, k)
        out[k] = to_json(result, k, metrics)
        if not args.json:
            print(f"\n### K = {k} per day\n")
            print(markdown_table(metrics))
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
