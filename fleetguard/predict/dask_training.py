"""`fleetguard train --dask SCHEDULER|local` and `evaluate --dask`: the dataset built on a Dask cluster from
the Parquet inputs (fleetguard.predict.dask_dataset), and XGBoost trained there through xgboost.dask.

The training set is the single-process one (the same instances, window, labels, event kinds and category
columns); what differs is where rows live and how XGBoost sees them: its histogram bins come from a merged
quantile sketch and its row subsampling draws per worker, so scores match the single-process model's
within a tolerance, not bit for bit (docs/scale-out.md states it; tests/scale/test_dask_training.py holds
it). When more negatives than the cap (200,000) are known, each share keeps its part of the cap.

`evaluate --dask` builds the features on the cluster and gathers the instances; the backtest's many small
retrains then run in this process (each is over one training window, which fits; the feature building
over the whole history is what needs the cluster).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from fleetguard.predict.dask_dataset import (
    ShareSpec,
    SourceFiles,
    build_share,
    category_sums,
    first_ts,
    sample_negatives,
    select_columns,
    share_shape,
    share_x,
    share_y,
    training_share,
)
from predictor.dataset import (
    DatasetSpec,
    Instances,
    candidate_categories,
    candidate_event_kinds,
    feature_names,
    fetch_events,
)
from predictor.feature_choice import (
    categories_in_rows,
    category_feature_name,
    columns_for,
    dropped_categories,
    kinds_in_window,
)
from predictor.metrics import average_precision
from predictor.models import XGBoostModel
from predictor.training import MAX_CATEGORIES, TrainedModel

MAX_NEGATIVES = 200_000  # as predictor.training
LOCAL_WORKERS = 2
SHARES_PER_WORKER = 2


class DaskTrainingError(Exception):
    """Training on Dask cannot run; one line."""


def xgb_params(y: np.ndarray[Any, Any], seed: int, model: XGBoostModel) -> dict[str, Any]:
    """predictor.models.XGBoostModel.fit's classifier settings, as xgboost.train parameters."""
    pos = max(1.0, float(y.sum()))
    return {
        "objective": "binary:logistic",
        "max_depth": model.params["max_depth"],
        "learning_rate": 0.08,
        "subsample": 0.8,
        "colsample_bytree": 0.8,
        "min_child_weight": 2.0,
        "scale_pos_weight": float(len(y) - pos) / pos,
        "tree_method": "hist",
        "seed": seed,
        "verbosity": 0,
    }


@contextlib.contextmanager
def dask_client(address: str, *, processes: bool = True) -> Iterator[Any]:
    """A client of the scheduler at `address`, or of a LocalCluster of two one-thread workers (`local`)."""
    from distributed import Client, LocalCluster

    # Dask logs every worker's start and stop at INFO; the command's own output says what matters.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if address == "local":
        with (
            LocalCluster(
                n_workers=LOCAL_WORKERS,
                threads_per_worker=1,
                processes=processes,
                dashboard_address=None,
                silence_logs=40,
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
        return
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as exc:
        raise DaskTrainingError(f"--dask {address}: cannot reach the scheduler ({exc})") from exc
    with client:
        yield client


@dataclass(frozen=True)
class Inputs:
    source: SourceFiles
    columns: tuple[str, ...]
    categorical_columns: tuple[str, ...]


def _shares(client: Any) -> int:
    workers = len(client.scheduler_info().get("workers", {})) or 1
    return max(2, workers * SHARES_PER_WORKER)


def _build(
    client: Any, con: duckdb.DuckDBPyConnection, inputs: Inputs, spec: DatasetSpec
) -> tuple[list[Any], ShareSpec, int]:
    kinds = candidate_event_kinds(con)
    categories = candidate_categories(con, inputs.categorical_columns)
    share_spec = ShareSpec(inputs.columns, spec, kinds, categories)
    n = _shares(client)
    futures = [client.submit(build_share, inputs.source, i, n, share_spec, pure=False) for i in range(n)]
    return futures, share_spec, n


def train_on_dask(
    client: Any,
    con: duckdb.DuckDBPyConnection,
    inputs: Inputs,
    spec: DatasetSpec,
    data_end_ts: float,
    train_window_seconds: float | None,
    seed: int = 0,
) -> TrainedModel:
    """predictor.training.train_from_views for the xgboost model, with the rows on the cluster."""
    import dask.array as da
    import xgboost.dask as dxgb

    built, share_spec, _ = _build(client, con, inputs, spec)
    start = min(client.gather([client.submit(first_ts, f) for f in built]))
    if not np.isfinite(start):
        raise DaskTrainingError("no instances: the samples hold no device with a full feature window")
    window = train_window_seconds or float(data_end_ts - start + spec.step_seconds)
    at = data_end_ts + 1e-6
    rows = [client.submit(training_share, f, at, window, spec.horizon_seconds) for f in built]
    shapes = client.gather([client.submit(share_shape, r) for r in rows])
    negatives = sum(s[2] for s in shapes)
    if negatives > MAX_NEGATIVES:
        rows = [
            client.submit(sample_negatives, r, int(MAX_NEGATIVES * s[2] / negatives), seed, i)
            for i, (r, s) in enumerate(zip(rows, shapes, strict=True))
        ]
        shapes = client.gather([client.submit(share_shape, r) for r in rows])
    positives = sum(s[1] for s in shapes)
    total = sum(s[0] for s in shapes)
    if positives == 0 or positives == total:
        raise DaskTrainingError(
            f"cannot train: {positives} positive and {total - positives} negative instances with known labels"
        )
    names = feature_names(inputs.columns, share_spec.kinds, share_spec.categories)
    chosen = set(
        kinds_in_window(fetch_events(con, share_spec.kinds), data_end_ts - window, at, spec.max_event_kinds)
    )
    kinds = tuple(k for k in share_spec.kinds if k in chosen)
    sums = sum(client.gather([client.submit(category_sums, r, share_spec.categories) for r in rows]))
    counts_row = np.zeros((1, len(names)), dtype=np.float32)
    index = {name: i for i, name in enumerate(names)}
    flat = [category_feature_name(c, v) for c, values in share_spec.categories for v in values]
    for name, total_rows in zip(flat, np.atleast_1d(sums), strict=False):
        counts_row[0, index[name]] = total_rows
    categories = categories_in_rows(names, share_spec.categories, counts_row, MAX_CATEGORIES)
    cols = columns_for(names, share_spec.kinds, kinds, dropped_categories(share_spec.categories, categories))
    selected = [client.submit(select_columns, r, cols) for r, s in zip(rows, shapes, strict=True) if s[0]]
    sizes = [s[0] for s in shapes if s[0]]
    x = da.concatenate(
        [
            da.from_delayed(client.submit(share_x, r), shape=(k, len(cols)), dtype=np.float32)
            for r, k in zip(selected, sizes, strict=True)
        ]
    )
    y = da.concatenate(
        [
            da.from_delayed(client.submit(share_y, r), shape=(k,), dtype=np.float64)
            for r, k in zip(selected, sizes, strict=True)
        ]
    )
    model = XGBoostModel()
    y_all = np.asarray(y.compute(), dtype=np.float64)
    dtrain = dxgb.DaskDMatrix(client, x, y)
    out = dxgb.train(
        client, xgb_params(y_all, seed, model), dtrain, num_boost_round=model.params["n_estimators"]
    )
    model.booster = out["booster"]
    model.booster.set_param({"nthread": model.params["n_jobs"]})
    scores = np.asarray(dxgb.predict(client, out["booster"], dtrain).compute(), dtype=np.float64)
    return TrainedModel(
        model=model,
        feature_names=tuple(names[i] for i in cols),
        event_kinds=kinds,
        categories=categories,
        window=(min(s[3] for s in shapes if s[0]), max(s[4] for s in shapes if s[0])),
        rows=total,
        positives=positives,
        train_pr_auc=average_precision(y_all, scores),
    )


def instances_on_dask(
    client: Any,
    con: duckdb.DuckDBPyConnection,
    inputs: Inputs,
    spec: DatasetSpec,
) -> tuple[Instances, tuple[str, ...]]:
    """Every instance, built on the cluster and gathered here in fetch_instances' order (time, device)."""
    built, share_spec, _ = _build(client, con, inputs, spec)
    parts: list[Instances] = client.gather(built)
    names = feature_names(inputs.columns, share_spec.kinds, share_spec.categories)
    device = np.concatenate([p.device_id for p in parts])
    ts = np.concatenate([p.ts for p in parts])
    order = np.lexsort((device.astype(str), ts))
    inst = Instances(
        device[order],
        ts[order],
        np.concatenate([p.label for p in parts])[order],
        np.concatenate([p.next_failure_ts for p in parts])[order],
        np.concatenate([p.x for p in parts])[order],
        names,
    )
    return inst, share_spec.kinds
