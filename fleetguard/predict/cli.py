"""Click commands `train`, `evaluate` and `predict` (fleetguard's CLI loads them lazily by name)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import duckdb

from fleetguard.predict.explain_output import prediction_rows, print_rows
from fleetguard.predict.inputs import (
    PATH,
    bad_data,
    duration_option,
    input_options,
    open_inputs,
)
from fleetguard.predict.progress import bar, note
from fleetguard.predict.settings import resolve
from fleetguard.predict.store_reader import STORE_MODEL_HINT
from fleetguard.predict.tables import markdown_table
from fleetguard.predict.warning_count import counted_warnings
from predictor import artifact
from predictor.backtest import BacktestConfig, BacktestError, run_backtest, summarise, to_json
from predictor.dataset import (
    build_instances,
    candidate_categories,
    candidate_event_kinds,
    data_end_ts,
    fetch_events,
    fetch_failures,
    fetch_instances,
)
from predictor.durations import format_duration, parse_duration
from predictor.registry import ALL_MODELS, model_names
from predictor.training import PolicyOptions, latest_per_device, save_trained, train_from_views

_DERIVED = "derived from the data when not given"
_DASK_HELP = "Build the dataset on a Dask cluster (scheduler address, or `local`); docs/scale-out.md."


@click.command("train")
@input_options
@click.option(
    "--horizon", default=None, callback=duration_option, help=f"Predict failures within this ({_DERIVED})."
)
@click.option(
    "--window", "feature_window", default=None, callback=duration_option, help="Feature window W (3 steps)."
)
@click.option("--step", default=None, callback=duration_option, help=f"Instance step ({_DERIVED}).")
@click.option("--model", "model_name", type=click.Choice(ALL_MODELS), default="cascade", show_default=True)
@click.option(
    "--train-window", default=None, callback=duration_option, help="Train on the last L_train only."
)
@click.option("--out", type=PATH, required=True, help="Model directory to write.")
@click.option(
    "--period", default=None, callback=duration_option, help="Selection period for K (default: one step)."
)
@click.option(
    "--budget-k",
    type=click.IntRange(min=1),
    default=None,
    help="Predictions per period fleet-wide (default: the devices that failed per period in training).",
)
@click.option(
    "--target-precision",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=None,
    help="Also require a risk floor fixed on out-of-fold scores for this precision (default: none).",
)
@click.option("--seed", default=0, show_default=True)
@click.option("--dask", "dask_address", help=_DASK_HELP)
def train_command(
    samples: Path | None,
    failures: Path | None,
    events: Path | None,
    store: Path | None,
    failure_xids: str | None,
    quiet: bool,
    horizon: float | None,
    feature_window: float | None,
    step: float | None,
    model_name: str,
    train_window: float | None,
    out: Path,
    period: float | None,
    budget_k: int | None,
    target_precision: float | None,
    seed: int,
    dask_address: str | None,
) -> None:
    """Train one model on the history and save it (arrays and JSON, no pickle) to --out."""
    if dask_address:
        from fleetguard.predict.dask_cli import check_dask_inputs

        check_dask_inputs(model_name, samples, store)
    con, inputs = open_inputs(samples, failures, events, store, failure_xids)
    try:
        spec, _ = resolve(con, step, feature_window, horizon, None, None, quiet=True)
        note("building features and training ...", quiet)
        with counted_warnings(quiet):
            if dask_address:
                from fleetguard.predict.dask_cli import train_dask

                trained = train_dask(
                    dask_address, con, inputs, (samples, failures, events), spec, train_window, seed
                )
            else:
                trained = train_from_views(
                    con,
                    inputs.feature_columns,
                    model_name,
                    spec,
                    data_end_ts(con),
                    train_window,
                    seed,
                    categorical_columns=inputs.categorical_columns,
                    options=PolicyOptions(period, budget_k, target_precision),
                )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.Error as exc:
        raise bad_data(exc, samples, failures, events, store) from exc
    finally:
        con.close()
    save_trained(out, trained, spec, inputs.feature_columns)
    click.echo(
        f"saved {model_name} to {out}: {trained.rows} training instances, {trained.positives} positive"
    )
    if trained.policy is not None:
        cal, rule = trained.policy.calibration, trained.policy.selection
        floor = (
            f", risk floor {rule.min_risk:.3f} for precision {rule.target_precision:g}"
            if rule.target_precision
            else ""
        )
        click.echo(
            f"calibration: {cal.kind.value} on out-of-fold scores (base rate {cal.base_rate:.2%}); "
            f"selection: K = {rule.k} per {format_duration(rule.period_seconds)}{floor}"
        )


@click.command("evaluate")
@input_options
@click.option(
    "--horizon", default=None, callback=duration_option, help=f"Predict failures within this ({_DERIVED})."
)
@click.option(
    "--window", "feature_window", default=None, callback=duration_option, help="Feature window W (3 steps)."
)
@click.option("--step", default=None, callback=duration_option, help=f"Instance step ({_DERIVED}).")
@click.option("--top-k", default=10, show_default=True, help="Predictions per scoring period.")
@click.option("--train-window", default=None, callback=duration_option, help=f"L_train ({_DERIVED}).")
@click.option(
    "--retrain-every", default=None, callback=duration_option, help=f"Δ: retrain this often ({_DERIVED})."
)
@click.option(
    "--period",
    default=None,
    callback=duration_option,
    help="Scoring period for K (default: one step); its budget is spent as the period runs.",
)
@click.option(
    "--pick-train-window", default=None, help="Comma list of L_train candidates, picked on validation."
)
@click.option("--models", default=",".join(ALL_MODELS), show_default=True, help="Comma list of models.")
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="Calibrate each retrain on out-of-fold scores (Brier, reliability; three more fits per model).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@click.option("--report", type=PATH, default=None, help="Write a self-contained HTML report here.")
@click.option("--seed", default=0, show_default=True)
@click.option("--dask", "dask_address", help=_DASK_HELP)
def evaluate_command(
    samples: Path | None,
    failures: Path | None,
    events: Path | None,
    store: Path | None,
    failure_xids: str | None,
    quiet: bool,
    horizon: float | None,
    feature_window: float | None,
    step: float | None,
    top_k: int,
    train_window: float | None,
    retrain_every: float | None,
    period: float | None,
    pick_train_window: str | None,
    models: str,
    calibrate: bool,
    as_json: bool,
    report: Path | None,
    seed: int,
    dask_address: str | None,
) -> None:
    """Backtest every model: retrain on the past only, score the next period, walk the whole history."""
    try:
        chosen = model_names([m.strip() for m in models.split(",") if m.strip()])
        candidates = (
            tuple(parse_duration(c) for c in pick_train_window.split(",")) if pick_train_window else ()
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    con, inputs = open_inputs(samples, failures, events, store, failure_xids)
    try:
        spec, settings = resolve(con, step, feature_window, horizon, train_window, retrain_every, quiet)
        note("building features ...", quiet)
        kinds = candidate_event_kinds(con)
        categories = candidate_categories(con, inputs.categorical_columns)
        if dask_address:
            from fleetguard.predict.dask_cli import instances_dask

            inst = instances_dask(dask_address, con, inputs, (samples, failures, events), spec, store)
        else:
            names = build_instances(con, inputs.feature_columns, spec, kinds, categories=categories)
            inst = fetch_instances(con, names)
        event_log = fetch_events(con, kinds)
        f_dev, f_ts = fetch_failures(con)
        end = data_end_ts(con)
    except duckdb.Error as exc:
        raise bad_data(exc, samples, failures, events, store) from exc
    finally:
        con.close()
    config = BacktestConfig(
        horizon_seconds=spec.horizon_seconds,
        train_window_seconds=settings.train_window,
        retrain_every_seconds=settings.retrain_every,
        period_seconds=period,
        step_seconds=spec.step_seconds,
        models=chosen,
        train_window_candidates=candidates,
        candidate_event_kinds=kinds,
        max_event_kinds=spec.max_event_kinds,
        candidate_categories=categories,
        seed=seed,
        calibrate=calibrate,
    )
    try:
        with counted_warnings(quiet):
            result = run_backtest(
                inst, f_dev, f_ts, end, config, progress=bar("retraining", quiet), events=event_log
            )
    except BacktestError as exc:
        raise click.ClickException(str(exc)) from exc
    metrics = summarise(result, top_k)
    if report is not None:
        from fleetguard.predict.report_html import render

        report.write_text(render(result, top_k, metrics))
    if as_json:
        click.echo(json.dumps(to_json(result, top_k, metrics), indent=2))
        return
    click.echo(markdown_table(metrics))


@click.command("predict")
@click.option("--model", "model_dir", type=PATH, required=True, help="Model directory written by train.")
@input_options
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
    """Score every device's latest complete window and list the K most at risk, with what drove each score."""
    try:
        loaded = artifact.load(model_dir)
    except artifact.ArtifactError as exc:
        raise click.ClickException(str(exc)) from exc
    con, inputs = open_inputs(samples, failures, events, store, failure_xids)
    try:
        artifact.check_schema(
            loaded, inputs.all_columns, str(samples or store), STORE_MODEL_HINT if store else ""
        )
        names = build_instances(
            con, loaded.feature_columns, loaded.spec, loaded.event_kinds, categories=loaded.categories
        )
        inst = latest_per_device(fetch_instances(con, names))
        # only devices still reporting: one whose last window ended long before the data did (a drive that
        # died months ago) is not a prediction anyone can act on
        inst = inst.subset(inst.ts > data_end_ts(con) - loaded.spec.window_seconds)
    except artifact.ArtifactError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.Error as exc:
        raise bad_data(exc, samples, failures, events, store) from exc
    finally:
        con.close()
    with counted_warnings(quiet):
        rows = prediction_rows(loaded, inst, top_k)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "model_id": loaded.model_id,
                    "horizon_hours": loaded.spec.horizon_seconds / 3600,
                    "calibrated": loaded.policy is not None,
                    "base_rate": loaded.policy.calibration.base_rate if loaded.policy else None,
                    "predictions": rows,
                },
                indent=2,
            )
        )
        return
    if loaded.policy is not None:
        click.echo(
            f"risk = probability of a failure within {format_duration(loaded.spec.horizon_seconds)} "
            f"(fleet base rate {loaded.policy.calibration.base_rate:.2%})"
        )
    else:
        click.echo("score: uncalibrated (a model saved before calibration; retrain for a probability)")
    print_rows(rows)


COMMANDS: list[click.Command] = [train_command, evaluate_command, predict_command]
