"""The `--dask` option of `fleetguard train` and `evaluate`: checks and errors as one line, then
fleetguard.predict.dask_training (dask, distributed and xgboost.dask are imported only here, on use)."""

from __future__ import annotations

from pathlib import Path

import click
import duckdb

from fleetguard.predict.contract import ContractInputs
from predictor.dataset import DatasetSpec, Instances, data_end_ts
from predictor.training import TrainedModel

Paths = tuple[Path | None, Path | None, Path | None]  # samples, failures, events


def check_dask_inputs(model_name: str | None, samples: Path | None, store: Path | None) -> None:
    if store is not None or samples is None:
        raise click.UsageError("--dask reads Parquet inputs (--samples, --failures, --events), not --store")
    if model_name is not None and model_name != "xgboost":
        raise click.UsageError("--dask trains XGBoost (xgboost.dask): give --model xgboost")


def _inputs(inputs: ContractInputs, paths: Paths) -> object:
    from fleetguard.predict.dask_dataset import SourceFiles
    from fleetguard.predict.dask_training import Inputs

    samples, failures, events = paths
    assert samples is not None
    source = SourceFiles(
        str(samples.resolve()),
        str(failures.resolve()) if failures else None,
        str(events.resolve()) if events else None,
    )
    return Inputs(source, inputs.feature_columns, inputs.categorical_columns)


def _missing() -> click.ClickException:
    return click.ClickException("--dask needs the scale extra: pip install 'fleetguard[scale]'")


def train_dask(
    address: str,
    con: duckdb.DuckDBPyConnection,
    inputs: ContractInputs,
    paths: Paths,
    spec: DatasetSpec,
    train_window: float | None,
    seed: int,
) -> TrainedModel:
    try:
        from fleetguard.predict.dask_training import DaskTrainingError, Inputs, dask_client, train_on_dask
    except ImportError as exc:
        raise _missing() from exc
    built = _inputs(inputs, paths)
    assert isinstance(built, Inputs)
    try:
        with dask_client(address) as client:
            return train_on_dask(client, con, built, spec, data_end_ts(con), train_window, seed)
    except DaskTrainingError as exc:
        raise click.ClickException(str(exc)) from exc


def instances_dask(
    address: str,
    con: duckdb.DuckDBPyConnection,
    inputs: ContractInputs,
    paths: Paths,
    spec: DatasetSpec,
    store: Path | None,
) -> Instances:
    check_dask_inputs(None, paths[0], store)
    try:
        from fleetguard.predict.dask_training import DaskTrainingError, Inputs, dask_client, instances_on_dask
    except ImportError as exc:
        raise _missing() from exc
    built = _inputs(inputs, paths)
    assert isinstance(built, Inputs)
    try:
        with dask_client(address) as client:
            inst, _ = instances_on_dask(client, con, built, spec)
            return inst
    except DaskTrainingError as exc:
        raise click.ClickException(str(exc)) from exc
