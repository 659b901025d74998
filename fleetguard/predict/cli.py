"""Click commands `train`, `evaluate` and `predict`; the fleetguard CLI registers `COMMANDS` on its group."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import duckdb

from predictor import artifact
from predictor.backtest import (
    ALL_MODELS,
    BacktestConfig,
    model_names,
    parse_duration,
    run_backtest,
    summarise,
    to_json,
)
from predictor.contract import ContractInputs, InputError, register_inputs
from predictor.dataset import (
    DatasetSpec,
    build_instances,
    data_end_ts,
    event_kinds,
    fetch_failures,
    fetch_instances,
)
from predictor.progress import bar, note
from predictor.store_reader import FailureRule, attach_store, register_store
from predictor.training import latest_per_device, train_from_views

F = TypeVar("F", bound=Callable[..., Any])
_PATH = click.Path(path_type=Path)


def _duration(_ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def _input_options(func: F) -> F:
    for option in reversed(
        [
            click.option(
                "--samples", type=_PATH, help="Samples: Parquet/CSV file or directory (device_id, ts, ...)."
            ),
            click.option(
                "--failures", type=_PATH, help="Failures: Parquet/CSV (device_id, ts, optional kind)."
            ),
            click.option(
                "--events", type=_PATH, help="Optional non-failure events (device_id, ts, kind), counted."
            ),
            click.option(
                "--store", type=_PATH, help="fleetguard's own DuckDB store instead of --samples/--failures."
            ),
            click.option(
                "--failure-xids",
                default=None,
                help="Comma list of XIDs that count as failures (with --store).",
            ),
            click.option("--quiet", is_flag=True, help="No progress output."),
        ]
    ):
        func = option(func)
    return func


def _open(
    samples: Path | None,
    failures: Path | None,
    events: Path | None,
    store: Path | None,
    failure_xids: str | None,
) -> tuple[duckdb.DuckDBPyConnection, ContractInputs]:
    con = duckdb.connect()
    try:
        if store is not None:
            if samples is not None or failures is not None:
                raise click.UsageError("give either --store or --samples/--failures, not both")
            rule = FailureRule()
            if failure_xids:
                rule = FailureRule(fatal_xids=tuple(int(x) for x in failure_xids.split(",") if x.strip()))
            alias = attach_store(con, store)
            return con, register_store(con, rule, schema=alias)
        if samples is None:
            raise click.UsageError("--samples (or --store) is required")
        return con, register_inputs(con, samples, failures, events)
    except InputError as exc:
        con.close()
        raise click.ClickException(str(exc)) from exc


def _bad_data(exc: duckdb.Error, *paths: Path | None) -> click.ClickException:
    """A value DuckDB could not read while building features (e.g. text in a numeric column past the rows
    it sampled for types): a clear error naming the inputs, not a traceback."""
    where = ", ".join(str(p) for p in paths if p is not None) or "the input"
    return click.ClickException(f"cannot read {where}: {type(exc).__name__}: {exc}")


def _spec(horizon: float, window: float, step: float) -> DatasetSpec:
    return DatasetSpec(window_seconds=window, horizon_seconds=horizon, step_seconds=step)


@click.command("train")
@_input_options
@click.option("--horizon", default="7d", callback=_duration, help="Predict failures within this time.")
@click.option("--window", "feature_window", default="3d", callback=_duration, help="Feature window W.")
@click.option(
    "--step", default="1d", callback=_duration, help="Instance step (one feature row per device per step)."
)
@click.option("--model", "model_name", type=click.Choice(ALL_MODELS), default="cascade", show_default=True)
@click.option("--train-window", default=None, callback=_duration, help="Train on the last L_train only.")
@click.option("--out", type=_PATH, required=True, help="Model directory to write.")
@click.option("--seed", default=0, show_default=True)
def train_command(
    samples: Path | None,
    failures: Path | None,
    events: Path | None,
    store: Path | None,
    failure_xids: str | None,
    quiet: bool,
    horizon: float,
    feature_window: float,
    step: float,
    model_name: str,
    train_window: float | None,
    out: Path,
    seed: int,
) -> None:
    """Train one model on the history and save it (arrays and JSON, no pickle) to --out."""
    con, inputs = _open(samples, failures, events, store, failure_xids)
    spec = _spec(horizon, feature_window, step)
    note("building features and training ...", quiet)
    try:
        trained = train_from_views(
            con, inputs.feature_columns, model_name, spec, data_end_ts(con), train_window, seed
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.Error as exc:
        raise _bad_data(exc, samples, failures, events, store) from exc
    finally:
        con.close()
    metrics = {
        "train_rows": trained.rows,
        "train_positives": trained.positives,
        "train_pr_auc": trained.train_pr_auc,
    }
    artifact.save(
        out,
        trained.model,
        spec,
        inputs.feature_columns,
        trained.event_kinds,
        trained.feature_names,
        trained.window,
        metrics,
    )
    click.echo(
        f"saved {model_name} to {out}: {trained.rows} training instances, {trained.positives} positive"
    )


@click.command("evaluate")
@_input_options
@click.option("--horizon", default="7d", callback=_duration, help="Predict failures within this time.")
@click.option("--window", "feature_window", default="3d", callback=_duration, help="Feature window W.")
@click.option("--step", default="1d", callback=_duration, help="Instance step.")
@click.option("--top-k", default=10, show_default=True, help="Predictions per scoring period.")
@click.option("--train-window", default="30d", callback=_duration, help="L_train.")
@click.option("--retrain-every", default="7d", callback=_duration, help="Δ: retrain this often.")
@click.option("--period", default=None, callback=_duration, help="Scoring period for K (default: Δ).")
@click.option(
    "--pick-train-window", default=None, help="Comma list of L_train candidates, picked on validation."
)
@click.option("--models", default=",".join(ALL_MODELS), show_default=True, help="Comma list of models.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@click.option("--report", type=_PATH, default=None, help="Write a self-contained HTML report here.")
@click.option("--seed", default=0, show_default=True)
def evaluate_command(
    samples: Path | None,
    failures: Path | None,
    events: Path | None,
    store: Path | None,
    failure_xids: str | None,
    quiet: bool,
    horizon: float,
    feature_window: float,
    step: float,
    top_k: int,
    train_window: float,
    retrain_every: float,
    period: float | None,
    pick_train_window: str | None,
    models: str,
    as_json: bool,
    report: Path | None,
    seed: int,
) -> None:
    """Backtest every model: retrain on the past only, score the next period, walk the whole history."""
    try:
        chosen = model_names([m.strip() for m in models.split(",") if m.strip()])
        candidates = (
            tuple(parse_duration(c) for c in pick_train_window.split(",")) if pick_train_window else ()
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    con, inputs = _open(samples, failures, events, store, failure_xids)
    spec = _spec(horizon, feature_window, step)
    try:
        note("building features ...", quiet)
        names = build_instances(con, inputs.feature_columns, spec, event_kinds(con, spec))
        inst = fetch_instances(con, names)
        f_dev, f_ts = fetch_failures(con)
        end = data_end_ts(con)
    except duckdb.Error as exc:
        raise _bad_data(exc, samples, failures, events, store) from exc
    finally:
        con.close()
    config = BacktestConfig(
        horizon_seconds=horizon,
        train_window_seconds=train_window,
        retrain_every_seconds=retrain_every,
        period_seconds=period,
        step_seconds=step,
        models=chosen,
        train_window_candidates=candidates,
        seed=seed,
    )
    try:
        result = run_backtest(inst, f_dev, f_ts, end, config, progress=bar("retraining", quiet))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    metrics = summarise(result, top_k)
    if report is not None:
        from predictor.report_html import render

        report.write_text(render(result, top_k, metrics))
    if as_json:
        click.echo(json.dumps(to_json(result, top_k, metrics), indent=2))
        return
    click.echo(markdown_table(metrics))


def markdown_table(metrics: dict[str, Any]) -> str:
    def f(v: float | None, d: int = 3) -> str:
        return "–" if v is None else f"{v:.{d}f}"

    lines = [
        "| model | precision@K | predictions | hits | recall | PR-AUC | median lead h | precision std "
        "| baseline same volume |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in metrics.items():
        lines.append(
            f"| {name} | {f(m.precision_at_k)} | {m.predictions} | {m.hits} | {f(m.recall)} "
            f"| {f(m.pr_auc)} | "
            f"{f(m.median_lead_time_hours, 1)} | {f(m.precision_std)} "
            f"| {f(m.baseline_precision_same_volume)} |"
        )
    return "\n".join(lines)


@click.command("predict")
@click.option("--model", "model_dir", type=_PATH, required=True, help="Model directory written by train.")
@_input_options
@click.option("--top-k", default=20, show_default=True, help="How many devices to list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def predict_command(
    model_dir: Path,
    samples: Path | None,
    failures: Path | None,
    events: Path | None,
    store: Path | None,
    failure_xids: str | None,
    quiet: bool,
    top_k: int,
    as_json: bool,
) -> None:
    """Score every device's latest window and list the K most at risk."""
    try:
        loaded = artifact.load(model_dir)
    except artifact.ArtifactError as exc:
        raise click.ClickException(str(exc)) from exc
    con, inputs = _open(samples, failures, events, store, failure_xids)
    try:
        artifact.check_schema(loaded, inputs.feature_columns, str(samples or store))
        names = build_instances(con, loaded.feature_columns, loaded.spec, loaded.event_kinds)
        inst = latest_per_device(fetch_instances(con, names))
        # only devices still reporting: one whose last window ended long before the data did (a drive that
        # died months ago) is not a prediction anyone can act on
        inst = inst.subset(inst.ts > data_end_ts(con) - loaded.spec.window_seconds)
    except artifact.ArtifactError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.Error as exc:
        raise _bad_data(exc, samples, failures, events, store) from exc
    finally:
        con.close()
    risk = loaded.model.score(inst.x) if len(inst) else inst.ts[:0]
    order = risk.argsort(kind="stable")[::-1][:top_k]
    rows = [
        {"rank": r, "device_id": str(inst.device_id[i]), "ts": float(inst.ts[i]), "risk": float(risk[i])}
        for r, i in enumerate(order, start=1)
    ]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "model_id": loaded.model_id,
                    "horizon_hours": loaded.spec.horizon_seconds / 3600,
                    "predictions": rows,
                },
                indent=2,
            )
        )
        return
    for row in rows:
        click.echo(f"{row['rank']:>3}  {row['device_id']:<32} {row['risk']:.4f}")
    if not rows:
        print("no devices to score", file=sys.stderr)


COMMANDS: list[click.Command] = [train_command, evaluate_command, predict_command]
