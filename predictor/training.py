"""Train one model on the most recent history and score the latest instance of every device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import numpy.typing as npt

from predictor import artifact
from predictor.dataset import (
    DatasetSpec,
    Instances,
    build_instances,
    candidate_categories,
    candidate_event_kinds,
    fetch_events,
    fetch_instances,
)
from predictor.feature_choice import (
    Categories,
    categories_in_rows,
    columns_for,
    dropped_categories,
    kinds_in_window,
)
from predictor.metrics import average_precision
from predictor.models import Model
from predictor.registry import make as make_any
from predictor.risk_policy import RiskPolicy, fit_risk_policy
from predictor.sliding import labels_known_at, training_indices

MAX_CATEGORIES = 10  # values per text column a model keeps: the most frequent in its training rows


@dataclass(frozen=True)
class TrainedModel:
    model: Model
    feature_names: tuple[str, ...]
    event_kinds: tuple[str, ...]
    categories: Categories
    window: tuple[float, float]
    rows: int
    positives: int
    train_pr_auc: float | None
    # calibration and selection rule; None from the Dask trainer, which does not fit them yet (such a
    # model ranks in `predict` but cannot score live)
    policy: RiskPolicy | None = None

    def figures(self) -> dict[str, int | float | None]:
        """What the model directory and the registry record of its training."""
        return {"train_rows": self.rows, "train_positives": self.positives, "train_pr_auc": self.train_pr_auc}


def save_trained(
    directory: Path,
    trained: TrainedModel,
    spec: DatasetSpec,
    feature_columns: tuple[str, ...],
    model_id: str | None = None,
) -> Path:
    """Save `trained` as a model directory (predictor/artifact.py) with everything it carries: its features,
    categories, calibration and selection rule, and its training figures."""
    return artifact.save(
        directory,
        trained.model,
        spec,
        feature_columns,
        trained.event_kinds,
        trained.feature_names,
        trained.window,
        dict(trained.figures()),
        model_id=model_id,
        categories=trained.categories,
        policy=trained.policy,
    )


@dataclass(frozen=True)
class PolicyOptions:
    """How the selection rule is cut (predictor/risk_policy.py): period (default one step), K (default from
    the training window's failures) and the target precision that fixes a risk floor (default: none)."""

    period_seconds: float | None = None
    k: int | None = None
    target_precision: float | None = None


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
    categorical_columns: tuple[str, ...] = (),
    options: PolicyOptions = PolicyOptions(),
) -> TrainedModel:
    """Build the features, fix the event kinds and the category encoding on the training window, train."""
    candidates = candidate_event_kinds(con)
    cat_candidates = candidate_categories(con, categorical_columns)
    names = build_instances(con, columns, spec, candidates, categories=cat_candidates)
    inst = fetch_instances(con, names)
    window = train_window_seconds or float(data_end_ts - inst.ts.min() + spec.step_seconds)
    idx, _ = training_indices(inst, data_end_ts + 1e-6, window, spec.horizon_seconds, 200_000, seed)
    chosen = set(
        kinds_in_window(
            fetch_events(con, candidates), data_end_ts - window, data_end_ts + 1e-6, spec.max_event_kinds
        )
    )
    kinds = tuple(k for k in candidates if k in chosen)
    categories = categories_in_rows(names, cat_candidates, inst.x[idx], MAX_CATEGORIES)
    cols = columns_for(names, candidates, kinds, dropped_categories(cat_candidates, categories))
    inst = Instances(
        inst.device_id,
        inst.ts,
        inst.label,
        inst.next_failure_ts,
        inst.x[:, cols],
        tuple(names[i] for i in cols),
    )
    model, idx, y = train_on_history(inst, name, spec, data_end_ts, train_window_seconds, seed, n_jobs=n_jobs)
    known = labels_known_at(inst, data_end_ts + 1e-6, spec.horizon_seconds)
    in_window = (inst.ts >= data_end_ts + 1e-6 - window) & (inst.ts < data_end_ts + 1e-6)
    policy = fit_risk_policy(
        lambda: make_any(name, n_jobs),
        inst.x[idx],
        y,
        inst.device_id[idx],
        window,
        spec.step_seconds,
        int((in_window & (known == 0)).sum()),
        seed,
        options.period_seconds,
        options.k,
        options.target_precision,
    )
    return TrainedModel(
        model=model,
        feature_names=inst.feature_names,
        event_kinds=kinds,
        categories=categories,
        window=(float(inst.ts[idx].min()), float(inst.ts[idx].max())),
        rows=len(idx),
        positives=int(y.sum()),
        train_pr_auc=average_precision(y, model.score(inst.x[idx])),
        policy=policy,
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
