"""The CLI's dataset and backtest settings: what was given, and what is derived from the data when not."""

from __future__ import annotations

import math

import click
import duckdb

from fleetguard.predict.inputs import data_shape
from predictor import defaults
from predictor.dataset import DatasetSpec
from predictor.durations import format_duration

DAY = 86400.0


def derive_step(gap: float) -> float:
    """One instance per day for data sampled daily or faster; for sparser data, whole days per sample."""
    if gap <= DAY:
        return DAY
    return math.ceil(gap / DAY - 1e-9) * DAY


def resolve(
    con: duckdb.DuckDBPyConnection,
    step: float | None,
    window: float | None,
    horizon: float | None,
    train_window: float | None,
    retrain_every: float | None,
    quiet: bool,
) -> tuple[DatasetSpec, defaults.Settings]:
    """Fill in every setting not given from the data's span and sampling step; print what was derived;
    refuse, saying what would work, when the data cannot hold a backtest."""
    first, last, gap = data_shape(con)
    derived_step = step is None
    step = step or derive_step(gap)
    span = last - first + step
    try:
        settings = defaults.derive(span, step, horizon, train_window, retrain_every)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    window = window or 3 * step
    if not quiet and (settings.derived or derived_step):
        extra = f" --step {format_duration(step)}" if derived_step else ""
        click.echo(settings.describe(span, extra), err=True)
    spec = DatasetSpec(window_seconds=window, horizon_seconds=settings.horizon, step_seconds=step)
    return spec, settings
