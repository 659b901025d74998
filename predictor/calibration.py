"""Calibration: a raw model score turned into the probability of a failure within the horizon.

A model's raw score is only an ordering (XGBoost trained with balanced class weights says 0.9 for a device
that fails one time in twenty). The map to a probability is fitted on out-of-fold scores of the training
window, never on scores the model gave its own training rows (those are overconfident) and never on data
after the window. Isotonic regression when there are enough positives for its steps to mean something;
Platt scaling (a logistic curve on the score's log-odds) when positives are few.

Folds are grouped by device: one device's neighbouring instances are near copies, and a fold that trains
on some of them and scores the others would make the fit look better than it will be live.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from predictor.models import Matrix, Model

FloatArray = npt.NDArray[np.float64]
# Below this many positive instances, isotonic steps follow noise: Platt's two parameters are all it earns.
MIN_ISOTONIC_POSITIVES = 30
DEFAULT_FOLDS = 3


class CalibrationKind(StrEnum):
    ISOTONIC = "isotonic"
    PLATT = "platt"


class CalibrationError(ValueError):
    """Out-of-fold scores that cannot be calibrated (one class only, too few devices)."""


@dataclass(frozen=True)
class Calibration:
    """Raw score -> probability. Isotonic: a non-decreasing step curve through (x, y); Platt: sigmoid(a z + b)
    with z the score's log-odds. `base_rate` is the training window's share of positive instances."""

    kind: CalibrationKind
    base_rate: float
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    a: float = 1.0
    b: float = 0.0
    positives: int = 0
    rows: int = 0

    def apply(self, scores: FloatArray) -> FloatArray:
        s = np.asarray(scores, dtype=np.float64)
        if self.kind is CalibrationKind.ISOTONIC:
            out = np.interp(s, np.asarray(self.x), np.asarray(self.y))
        else:
            out = 1.0 / (1.0 + np.exp(-(self.a * _logit(s) + self.b)))
        # a score the model could not make stays unknown; everything else is a probability
        return np.where(np.isnan(s), np.nan, np.clip(out, 0.0, 1.0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "base_rate": self.base_rate,
            "x": list(self.x),
            "y": list(self.y),
            "a": self.a,
            "b": self.b,
            "positives": self.positives,
            "rows": self.rows,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        x = tuple(float(v) for v in d.get("x", ()))
        y = tuple(float(v) for v in d.get("y", ()))
        kind = CalibrationKind(d["kind"])
        base_rate = float(d["base_rate"])
        if kind is CalibrationKind.ISOTONIC and (
            len(x) != len(y) or not x or any(b < a for a, b in itertools.pairwise(y))
        ):
            raise ValueError("isotonic calibration needs equal, non-empty x and y with y non-decreasing")
        if not (0.0 <= base_rate <= 1.0) or not all(math.isfinite(v) for v in (*x, *y)):
            raise ValueError("calibration values out of range")
        return cls(
            kind=kind,
            base_rate=base_rate,
            x=x,
            y=y,
            a=float(d.get("a", 1.0)),
            b=float(d.get("b", 0.0)),
            positives=int(d.get("positives", 0)),
            rows=int(d.get("rows", 0)),
        )


def _logit(p: FloatArray) -> FloatArray:
    q = np.clip(p, 1e-6, 1 - 1e-6)
    return np.asarray(np.log(q / (1 - q)), dtype=np.float64)


def fit_calibration(scores: FloatArray, y: FloatArray, weights: FloatArray | None = None) -> Calibration:
    """Fit score -> P(failure within the horizon) on out-of-fold `scores` with labels `y`. `weights` undo a
    sampling of the negatives (a kept negative stands for 1/fraction of them), so the probabilities are
    those of the whole window, not of the sample."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    ok = ~np.isnan(s)
    s, y, w = s[ok], y[ok], w[ok]
    positives = int(y.sum())
    if positives == 0 or positives == len(y):
        raise CalibrationError(f"cannot calibrate on {positives} positive of {len(y)} out-of-fold scores")
    base_rate = float((w * y).sum() / w.sum())
    if positives >= MIN_ISOTONIC_POSITIVES:
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        iso.fit(s, y, sample_weight=w)
        return Calibration(
            CalibrationKind.ISOTONIC,
            base_rate,
            x=tuple(float(v) for v in iso.X_thresholds_),
            y=tuple(float(v) for v in iso.y_thresholds_),
            positives=positives,
            rows=len(y),
        )
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=1e4, max_iter=1000)
    lr.fit(_logit(s)[:, None], y, sample_weight=w)
    return Calibration(
        CalibrationKind.PLATT,
        base_rate,
        a=float(lr.coef_[0][0]),
        b=float(lr.intercept_[0]),
        positives=positives,
        rows=len(y),
    )


def device_folds(device_id: npt.NDArray[np.object_], folds: int, seed: int) -> npt.NDArray[np.int64]:
    """A fold number per row, every row of a device in the same fold (devices shuffled by `seed`)."""
    devices = np.unique(device_id.astype(str))
    rng = np.random.default_rng([seed, 7])
    fold_of = dict(zip(rng.permutation(devices).tolist(), np.arange(len(devices)) % folds, strict=True))
    return np.asarray([fold_of[str(d)] for d in device_id], dtype=np.int64)


def out_of_fold_scores(
    make: Callable[[], Model],
    x: Matrix,
    y: FloatArray,
    device_id: npt.NDArray[np.object_],
    seed: int,
    folds: int = DEFAULT_FOLDS,
) -> FloatArray:
    """Every training row scored by a model fitted without its device (NaN where a fold's training part
    had one class only, so could not be fitted)."""
    fold = device_folds(device_id, folds, seed)
    out = np.full(len(y), np.nan)
    for f in range(folds):
        test = fold == f
        train = ~test
        if not test.any() or y[train].sum() == 0 or y[train].sum() == train.sum():
            continue
        model = make()
        model.fit(x[train], y[train], seed)
        out[test] = model.score(x[test])
    return out


def negative_weights(y: FloatArray, kept_negatives: int, all_negatives: int) -> FloatArray:
    """Weights that make a sample of the negatives count as all of them."""
    factor = all_negatives / kept_negatives if kept_negatives > 0 else 1.0
    return np.where(y > 0, 1.0, factor)


def brier_score(risk: FloatArray, y: FloatArray) -> float:
    ok = ~np.isnan(risk)
    if not ok.any():
        return float("nan")
    return float(np.mean((risk[ok] - y[ok]) ** 2))


def reliability_curve(risk: FloatArray, y: FloatArray, bins: int = 10) -> list[tuple[float, float, int]]:
    """(mean predicted risk, observed failure share, rows) per risk bin with rows: the reliability curve."""
    ok = ~np.isnan(risk)
    r, t = risk[ok], y[ok]
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(r, edges[1:-1]), 0, bins - 1)
    out = []
    for b in range(bins):
        m = idx == b
        if m.any():
            out.append((float(r[m].mean()), float(t[m].mean()), int(m.sum())))
    return out
