"""Train one model on the most recent history and score the latest instance of every device."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import numpy.typing as npt

from predictor.dataset import (
    DatasetSpec,
    Instances,
    build_instances,
    candidate_event_kinds,
    fetch_events,
    fetch_instances,
)
from predictor.feature_choice import columns_for, kinds_in_window
from predictor.metrics import average_precision
from predictor.models import Model
from predictor.registry import make as make_any
from predictor.sliding import training_indices


@dataclass(frozen=True)
class TrainedModel:
    model: Model
    feature_names: tuple[str, ...]
    event_kinds: tuple[str, ...]
    window: tuple[float, float]
    rows: int
    positives: int
    train_pr_auc: float | None


def train_on_history(
    inst: Instances,
    name: str,
    spec: DatasetSpec,
    data_end_ts: float,
    train_window_seconds: float | None,
    seed: int = 0,
    max_negatives: int = 200_000,
    n_jobs: int = 2,
) -> tuple[Model, npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Fit `name` on the instances whose labels are known at the end of the data (last L_train of them)."""
    window = train_window_seconds or float(data_end_ts - inst.ts.min() + spec.step_seconds)
    idx, y = training_indices(inst, data_end_ts + 1e-6, window, spec.horizon_seconds, max_negatives, seed)
    if y.sum() == 0 or y.sum() == len(y):
        raise ValueError(
            f"cannot train: {int(y.sum())} positive and {int(len(y) - y.sum())} negative instances "
            "with known "
            "labels (need failures in the history and a horizon's worth of data after some samples)"
        )
    model = make_any(name, n_jobs)
    model.fit(inst.x[idx], y, seed)
    return model, idx, y


def train_from_views(
    con: duckdb.DuckDBPyConnection,
    columns: tuple[str, ...],
    name: str,
    spec: DatasetSpec,
    data_end_ts: float,
    train_window_seconds: float | None,
    seed: int = 0,
    n_jobs: int = 2,
) -> TrainedModel:
    candidates = candidate_event_kinds(con)
    names = build_instances(con, columns, spec, candidates)
    inst = fetch_instances(con, names)
    # The event kinds the model counts are those frequent in its own training window.
    start = data_end_ts - (train_window_seconds or data_end_ts - float(inst.ts.min()) + spec.step_seconds)
    chosen = set(
        kinds_in_window(fetch_events(con, candidates), start, data_end_ts + 1e-6, spec.max_event_kinds)
    )
    kinds = tuple(k for k in candidates if k in chosen)
    cols = columns_for(names, candidates, kinds)
    inst = Instances(
        inst.device_id,
        inst.ts,
        inst.label,
        inst.next_failure_ts,
        inst.x[:, cols],
        tuple(names[i] for i in cols),
    )
    model, idx, y = train_on_history(inst, name, spec, data_end_ts, train_window_seconds, seed, n_jobs=n_jobs)
    return TrainedModel(
        model=model,
        feature_names=inst.feature_names,
        event_kinds=kinds,
        window=(float(inst.ts[idx].min()), float(inst.ts[idx].max())),
        rows=len(idx),
        positives=int(y.sum()),
        train_pr_auc=average_precision(y, model.score(inst.x[idx])),
    )


def latest_per_device(inst: Instances) -> Instances:
    """Each device's most recent instance (the one a live or batch prediction scores)."""
    if len(inst) == 0:
        return inst
    order = np.lexsort((inst.ts, inst.device_id.astype(str)))
    dev_sorted = inst.device_id[order].astype(str)
    last = np.ones(len(order), dtype=bool)
    last[:-1] = dev_sorted[1:] != dev_sorted[:-1]
    return inst.subset(order[last])
