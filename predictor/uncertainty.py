"""Bootstrap confidence intervals for a backtest's figures: precision@K, recall, and the ratio of a model's
precision to `xgboost_static`'s at equal volume.

A backtest on a few dozen failures moves by several points with any change of negatives, so a figure without
its interval cannot say whether one model beats another. Two resamplings, because the noise has two sources:
devices (which devices happened to be in the fleet: each device's predictions, hits and failures go in or out
together) and days (which days happened to be scored). Each replicate redraws the units with replacement and
recomputes every figure on the same draw, so the ratio's interval accounts for the two models sharing hits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from predictor.metrics import Scored, caught_failures

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
DAY = 86400.0
REPLICATES = 1000
LEVEL = 0.95


class Resampling(StrEnum):
    DEVICES = "devices"
    DAYS = "days"


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None

    def contains(self, value: float) -> bool:
        return self.low is not None and self.high is not None and self.low <= value <= self.high

    def as_list(self) -> list[float | None]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Intervals:
    """95% intervals of one model's figures under one resampling."""

    precision: Interval
    recall: Interval
    ratio_to_static: Interval  # precision / static's precision at the same volume

    def as_dict(self) -> dict[str, list[float | None]]:
        return {
            "precision_at_k": self.precision.as_list(),
            "recall": self.recall.as_list(),
            "ratio_to_static": self.ratio_to_static.as_list(),
        }


def _units(scored: Scored, resampling: Resampling) -> tuple[IntArray, IntArray, int]:
    """Unit index of each instance and of each failure in the scored range, and the number of units."""
    start = float(scored.period_starts[0]) if len(scored.period_starts) else 0.0
    end = float(scored.period_starts[-1] + scored.period_seconds) if len(scored.period_starts) else 0.0
    in_range = (scored.failures_ts >= start) & (scored.failures_ts < end)
    if resampling is Resampling.DEVICES:
        keys = np.concatenate([scored.device_id.astype(str), scored.failures_device[in_range].astype(str)])
    else:
        keys = (
            np.concatenate([np.floor(scored.ts / DAY), np.floor(scored.failures_ts[in_range] / DAY)])
            .astype(np.int64)
            .astype(str)
        )
    _, unit = np.unique(keys, return_inverse=True)
    n_units = int(unit.max()) + 1 if len(unit) else 0
    return unit[: len(scored.ts)].astype(np.int64), unit[len(scored.ts) :].astype(np.int64), n_units


def _per_unit(
    chosen: IntArray, unit: IntArray, scored: Scored, n_units: int
) -> tuple[FloatArray, FloatArray]:
    """(predictions, hits) per unit of one selection."""
    hit = (scored.label[chosen] == 1.0).astype(np.float64)
    preds = np.bincount(unit[chosen], minlength=n_units).astype(np.float64)
    hits = np.bincount(unit[chosen], weights=hit, minlength=n_units).astype(np.float64)
    return preds, hits


def bootstrap(
    scored: Scored,
    chosen: IntArray,
    baseline: IntArray,
    resampling: Resampling,
    seed: int = 0,
    replicates: int = REPLICATES,
) -> Intervals:
    """Intervals of precision, recall and the ratio to the baseline (static at this selection's volume)."""
    unit, f_unit, n = _units(scored, resampling)
    empty = Interval(None, None)
    if n == 0:
        return Intervals(empty, empty, empty)
    preds, hits = _per_unit(chosen, unit, scored, n)
    b_preds, b_hits = _per_unit(baseline, unit, scored, n)
    caught = caught_failures(scored, chosen)
    failures = np.bincount(f_unit, minlength=n).astype(np.float64)
    caught_n = np.bincount(f_unit, weights=caught.astype(np.float64), minlength=n)
    rng = np.random.default_rng([seed, 11, 0 if resampling is Resampling.DEVICES else 1])
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=replicates).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = (counts @ hits) / (counts @ preds)
        recall = (counts @ caught_n) / (counts @ failures)
        ratio = precision / ((counts @ b_hits) / (counts @ b_preds))
    return Intervals(_interval(precision), _interval(recall), _interval(ratio))


def _interval(values: FloatArray) -> Interval:
    v = values[np.isfinite(values)]
    if len(v) < 0.5 * len(values) or len(v) == 0:
        return Interval(None, None)  # most replicates undefined (no predictions, no failures)
    tail = (1.0 - LEVEL) / 2.0 * 100.0
    lo, hi = np.percentile(v, [tail, 100.0 - tail])
    return Interval(float(lo), float(hi))


def verdict(ratio: float | None, intervals: dict[Resampling, Intervals]) -> str:
    """One plain sentence on whether the difference from static lies inside the noise."""
    if ratio is None:
        return "no ratio (no predictions, or static made no hit at this volume)"
    wide = [r.value for r, iv in intervals.items() if iv.ratio_to_static.contains(1.0)]
    undefined = [r.value for r, iv in intervals.items() if iv.ratio_to_static.low is None]
    if undefined:
        return f"x{ratio:.2f}: too few hits to tell (no interval resampling {', '.join(undefined)})"
    if wide:
        return f"x{ratio:.2f} is inside the noise (the interval resampling {' and '.join(wide)} holds 1.0)"
    side = "above" if ratio > 1 else "below"
    return f"x{ratio:.2f}: {side} static beyond the noise of either resampling"
