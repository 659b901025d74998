"""What drove a score: per-feature contributions for any model, and the top ones for a prediction.

XGBoost gives exact additive contributions to the log-odds (its `pred_contribs`, TreeSHAP). For the other
models and the ensembles, a feature's contribution is how much the score drops when that feature is
withheld (set missing, which every model fills as it does at training): the same question asked of
any scorer, at the cost of one scoring pass per feature, so it is asked only of the listed predictions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from predictor.models import Matrix, Model, XGBoostModel

TOP_FEATURES = 3


@dataclass(frozen=True)
class Driver:
    """One feature behind a prediction: its value and how much it raised the score."""

    feature: str
    value: float | None
    contribution: float
    reference: float | None = None  # the typical healthy value it is measured from, when there is one
    # the share of the fleet scored with it (percent) whose value is at or below this one, when known
    percentile: float | None = None

    def as_dict(self) -> dict[str, float | str | None]:
        out: dict[str, float | str | None] = {
            "feature": self.feature,
            "value": self.value,
            "contribution": round(self.contribution, 6),
        }
        if self.reference is not None:
            out["reference"] = self.reference
        if self.percentile is not None:
            out["percentile"] = round(self.percentile, 1)
        return out


def fleet_percentiles(fleet: Matrix, rows: Matrix) -> npt.NDArray[np.float64]:
    """(rows, features): for each value, the percentage of the fleet's devices whose value of that feature
    is at or below it. `fleet` is every device scored at the same time, so "p99" says the value is among
    the highest in the fleet right now, which a bare value does not. NaN where the value is missing or the
    fleet has no value for the feature."""
    out = np.full(rows.shape, np.nan)
    for j in range(rows.shape[1]):
        column = np.sort(fleet[:, j][~np.isnan(fleet[:, j])])
        present = ~np.isnan(rows[:, j])
        if len(column) == 0 or not present.any():
            continue
        at_or_below = np.searchsorted(column, rows[present, j], side="right")
        out[present, j] = 100.0 * at_or_below / len(column)
    return out


def contributions(model: Model, x: Matrix) -> npt.NDArray[np.float64]:
    """(rows, features) contributions: log-odds for XGBoost, score drop when withheld otherwise."""
    if isinstance(model, XGBoostModel):
        import xgboost as xgb

        out = model.booster.predict(xgb.DMatrix(x), pred_contribs=True)
        return np.asarray(out, dtype=np.float64)[:, : x.shape[1]]
    base = model.score(x)
    result = np.zeros(x.shape, dtype=np.float64)
    for j in range(x.shape[1]):
        withheld = x.copy()
        withheld[:, j] = np.nan
        result[:, j] = base - model.score(withheld)
    return result


def top_drivers(
    model: Model, x: Matrix, feature_names: tuple[str, ...], top: int = TOP_FEATURES
) -> list[list[Driver]]:
    """For each row, the `top` features that raised its score most (none when nothing raised it)."""
    if len(x) == 0:
        return []
    contrib = contributions(model, x)
    out = []
    for row in range(len(x)):
        order = np.argsort(-contrib[row], kind="stable")[:top]
        out.append(
            [
                Driver(
                    feature_names[j],
                    None if np.isnan(x[row, j]) else float(x[row, j]),
                    float(contrib[row, j]),
                )
                for j in order
                if contrib[row, j] > 0
            ]
        )
    return out


def drivers_vs_reference(
    risk_of: Callable[[Matrix], npt.NDArray[np.float64]],
    x: Matrix,
    reference: tuple[float, ...],
    feature_names: tuple[str, ...],
    top: int = TOP_FEATURES,
    fleet: Matrix | None = None,
) -> list[list[Driver]]:
    """For each row, the features whose values raised its risk most above what it would be with that one
    feature at the reference (a typical healthy device's value): contribution = risk(x) - risk(x with
    feature j at its reference), in probability. A feature at its reference value contributes exactly
    nothing, so a zero counter cannot be named as what drove a risk. With `fleet` (every device scored
    with these rows), each driver also carries its value's fleet percentile."""
    if len(x) == 0:
        return []
    pct = fleet_percentiles(fleet, x) if fleet is not None else np.full(x.shape, np.nan)
    base = risk_of(x)
    contrib = np.zeros(x.shape, dtype=np.float64)
    for j, ref in enumerate(reference):
        moved = x[:, j] != ref
        moved &= ~(np.isnan(x[:, j]) & np.isnan(ref))
        if not moved.any():
            continue
        at_ref = x[moved].copy()
        at_ref[:, j] = ref
        contrib[moved, j] = base[moved] - risk_of(at_ref)
    out = []
    for row in range(len(x)):
        order = np.argsort(-contrib[row], kind="stable")[:top]
        out.append(
            [
                Driver(
                    feature_names[j],
                    None if np.isnan(x[row, j]) else float(x[row, j]),
                    float(contrib[row, j]),
                    None if np.isnan(reference[j]) else float(reference[j]),
                    None if np.isnan(pct[row, j]) else float(pct[row, j]),
                )
                for j in order
                if contrib[row, j] > 0
            ]
        )
    return out
