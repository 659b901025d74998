"""Sliding training: which instances a model retrained at time `at` may learn from, and the L_train pick.

At time `at` only the past is known: an instance is a known positive when its failure already happened
(before `at`, within H of the instance) and a known negative when its whole horizon ended before `at`
without one. Everything else is left out of training, so no label ever leaks from after `at`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from predictor.dataset import Instances
from predictor.members import make_single as make_model
from predictor.metrics import average_precision


def labels_known_at(inst: Instances, at: float, horizon_seconds: float) -> npt.NDArray[np.float64]:
    nf = inst.next_failure_ts
    with np.errstate(invalid="ignore"):
        pos = (nf < at) & (nf < inst.ts + horizon_seconds) & (inst.ts < at)
        neg = (inst.ts + horizon_seconds <= at) & ~pos
    return np.where(pos, 1.0, np.where(neg, 0.0, np.nan))


def negatives_in_window(inst: Instances, at: float, window_seconds: float, horizon_seconds: float) -> int:
    """How many known negatives [at - L_train, at) holds before any sampling (calibration weights)."""
    known = labels_known_at(inst, at, horizon_seconds)
    return int(((inst.ts >= at - window_seconds) & (inst.ts < at) & (known == 0)).sum())


def training_indices(
    inst: Instances,
    at: float,
    window_seconds: float,
    horizon_seconds: float,
    max_negatives: int,
    seed: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Instances in [at - L_train, at) with labels known at `at`; negatives sampled to `max_negatives`."""
    known = labels_known_at(inst, at, horizon_seconds)
    in_window = (inst.ts >= at - window_seconds) & (inst.ts < at) & ~np.isnan(known)
    idx = np.flatnonzero(in_window)
    y = known[idx]
    neg = idx[y == 0]
    if len(neg) > max_negatives:
        rng = np.random.default_rng([seed, int(at)])
        keep_neg = np.sort(rng.choice(neg, size=max_negatives, replace=False))
        idx = np.sort(np.concatenate([idx[y == 1], keep_neg]))
        y = known[idx]
    return idx, y


def pick_train_window(
    inst: Instances,
    at: float,
    candidates: Sequence[float],
    validation_seconds: float,
    horizon_seconds: float,
    max_negatives: int,
    seed: int,
    n_jobs: int = 2,
) -> float | None:
    """The candidate L_train whose XGBoost, trained on what was known at the start of the validation slice,
    ranks the slice best (PR-AUC).

    The slice is [at - H - V, at - H): the latest instances whose whole horizon has passed by `at`, so both
    outcomes are known (an instance of the last H before `at` can only be a known positive: a slice there
    holds almost no negatives, and none at all unless instances fall exactly H before `at`). Its labels are
    those known at `at`; the pick uses nothing from the scoring period. None when the slice lacks a class.
    """
    val_end = at - horizon_seconds
    val_start = val_end - validation_seconds
    val_labels = labels_known_at(inst, at, horizon_seconds)
    val = np.flatnonzero((inst.ts >= val_start) & (inst.ts < val_end) & ~np.isnan(val_labels))
    if len(val) == 0 or val_labels[val].sum() == 0 or val_labels[val].sum() == len(val):
        return None
    best: tuple[float, float] | None = None
    for window in candidates:
        idx, y = training_indices(inst, val_start, window, horizon_seconds, max_negatives, seed)
        if y.sum() < 2 or y.sum() == len(y):
            continue
        model = make_model("xgboost", n_jobs)
        model.fit(inst.x[idx], y, seed)
        ap = average_precision(val_labels[val], model.score(inst.x[val]))
        if ap is not None and (best is None or ap > best[1]):
            best = (window, ap)
    return None if best is None else best[0]
