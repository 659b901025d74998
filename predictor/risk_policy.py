"""What a saved model carries besides its trees: how a score becomes a risk, which risks become predictions,
and what a typical device looks like (the reference an explanation is measured from).

All three are fixed on the training window alone: the calibration and the risk floor on out-of-fold
scores (predictor/calibration.py), the budget K from how many devices failed there, the reference from
its negatives. Live scoring and the backtest then apply them through the same functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from predictor.calibration import (
    Calibration,
    fit_calibration,
    negative_weights,
    out_of_fold_scores,
)
from predictor.models import Matrix, Model
from predictor.selection import SelectionRule

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RiskPolicy:
    calibration: Calibration
    selection: SelectionRule
    # per feature: the median over the training window's negatives (NaN: the feature was never present)
    reference: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "calibration": self.calibration.to_dict(),
            "selection": self.selection.to_dict(),
            "reference": [None if math.isnan(v) else v for v in self.reference],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RiskPolicy:
        return cls(
            calibration=Calibration.from_dict(d["calibration"]),
            selection=SelectionRule.from_dict(d["selection"]),
            reference=tuple(float("nan") if v is None else float(v) for v in d["reference"]),
        )


def risk_floor(risk: FloatArray, y: FloatArray, weights: FloatArray, target_precision: float) -> float:
    """The lowest calibrated risk such that the training rows at or above it fail at `target_precision` or
    more (weighted as the whole window); 1.0 (nothing qualifies) when no level reaches it."""
    ok = ~np.isnan(risk)
    r, t, w = risk[ok], y[ok], weights[ok]
    order = np.argsort(-r, kind="stable")
    r, t, w = r[order], t[order], w[order]
    precision = np.cumsum(w * t) / np.cumsum(w)
    # only cut between distinct risks: rows with equal risk are all in or all out
    last_of_level = np.r_[r[1:] != r[:-1], True]
    good = np.flatnonzero(last_of_level & (precision >= target_precision))
    return float(r[good[-1]]) if len(good) else 1.0


def budget_k(device_id: npt.NDArray[np.object_], y: FloatArray, window_seconds: float, period: float) -> int:
    """K per period: as many devices as failed (had a positive instance) in a period of the training window
    on average, at least one."""
    failing = len(np.unique(device_id[y > 0].astype(str)))
    return max(1, math.ceil(failing * period / max(window_seconds, period) - 1e-9))


def fit_risk_policy(
    make: Callable[[], Model],
    x: Matrix,
    y: FloatArray,
    device_id: npt.NDArray[np.object_],
    window_seconds: float,
    step_seconds: float,
    all_negatives: int,
    seed: int,
    period_seconds: float | None = None,
    k: int | None = None,
    target_precision: float | None = None,
) -> RiskPolicy:
    """Calibration, selection and reference from the training rows (x, y) alone. `all_negatives`: how many
    negatives the window held before sampling. The period defaults to one step; K to `budget_k`."""
    oof = out_of_fold_scores(make, x, y, device_id, seed)
    weights = negative_weights(y, int((y == 0).sum()), all_negatives)
    calibration = fit_calibration(oof, y, weights)
    period = period_seconds or step_seconds
    floor = 0.0
    if target_precision is not None:
        floor = risk_floor(calibration.apply(oof), y, weights, target_precision)
    rule = SelectionRule(
        k=k if k is not None else budget_k(device_id, y, window_seconds, period),
        period_seconds=period,
        step_seconds=step_seconds,
        min_risk=floor,
        target_precision=target_precision,
    )
    negatives = np.asarray(x[y == 0], dtype=np.float64)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)  # all-NaN columns
            reference = np.nanmedian(negatives, axis=0) if len(negatives) else np.full(x.shape[1], np.nan)
    return RiskPolicy(calibration, rule, tuple(float(v) for v in reference))
