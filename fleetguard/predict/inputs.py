"""Opening the predictor's input (files or fleetguard's store) for the CLI, with errors as one clear line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import duckdb

from fleetguard.predict.contract import ContractInputs, InputError, register_inputs
from fleetguard.predict.store_reader import FailureRule, attach_store, register_store
from predictor.durations import parse_duration
from predictor.views import SAMPLES_VIEW

F = TypeVar("F", bound=Callable[..., Any])
PATH = click.Path(path_type=Path)


def duration_option(_ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def input_options(func: F) -> F:
    for option in reversed(
        [
            click.option(
                "--samples", type=PATH, help="Samples: Parquet/CSV file or directory (device_id, ts, ...)."
            ),
            click.option(
                "--failures", type=PATH, help="Failures: Parquet/CSV (device_id, ts, optional kind)."
            ),
            click.option(
                "--events", type=PATH, help="Optional non-failure events (device_id, ts, kind), counted."
            ),
            click.option(
                "--store", type=PATH, help="fleetguard's own DuckDB store instead of --samples/--failures."
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


def open_inputs(
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
                try:
                    codes = tuple(int(x) for x in failure_xids.split(",") if x.strip())
                except ValueError as exc:
                    raise click.ClickException(
                        f"--failure-xids: expected XIDs separated by commas, got {failure_xids!r}"
                    ) from exc
                rule = FailureRule(fatal_xids=codes)
            alias = attach_store(con, store)
            return con, register_store(con, rule, schema=alias)
        if samples is None:
            raise click.UsageError("--samples (or --store) is required")
        return con, register_inputs(con, samples, failures, events)
    except InputError as exc:
        con.close()
        raise click.ClickException(str(exc)) from exc
    except click.ClickException:
        con.close()
        raise


def bad_data(exc: duckdb.Error, *paths: Path | None) -> click.ClickException:
    """A value DuckDB could not read while building features (e.g. text in a numeric column past the rows
    it sampled for types): a clear error naming the inputs, not a traceback."""
    where = ", ".join(str(p) for p in paths if p is not None) or "the input"
    return click.ClickException(f"cannot read {where}: {type(exc).__name__}: {exc}")


def data_shape(con: duckdb.DuckDBPyConnection) -> tuple[float, float, float]:
    """(first sample time, last sample time, typical gap between a device's samples) in seconds. The gap is
    the median over the first 200 devices: enough to tell hourly from daily without a second full scan."""
    row = con.execute(
        f"""WITH few AS (SELECT DISTINCT device_id FROM {SAMPLES_VIEW} ORDER BY device_id LIMIT 200),
        gaps AS (SELECT ts - lag(ts) OVER (PARTITION BY device_id ORDER BY ts) AS gap
                 FROM {SAMPLES_VIEW} WHERE device_id IN (SELECT device_id FROM few))
        SELECT (SELECT min(ts) FROM {SAMPLES_VIEW}), (SELECT max(ts) FROM {SAMPLES_VIEW}),
               (SELECT median(gap) FROM gaps WHERE gap > 0)"""
    ).fetchone()
    if row is None or row[0] is None:
        return 0.0, 0.0, 0.0
    return float(row[0]), float(row[1]), float(row[2] or 0.0)
