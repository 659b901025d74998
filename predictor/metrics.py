"""The backtest metrics of chosen predictions: precision@K, recall, PR-AUC, lead time (selection.py chooses).

A prediction is one device picked in one period, at one instance time; it is a hit when the device fails
within H after that instance. Recall is the share of the failures inside the scored range that
some prediction caught beforehand; lead time is failure time minus the earliest catching prediction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Scored:
    """The instances a backtest scored: period index, device, instance time, label, next failure time."""

    period: IntArray
    device_id: npt.NDArray[np.object_]
    ts: FloatArray
    label: FloatArray
    next_failure_ts: FloatArray
    period_starts: FloatArray  # start of each period; period i covers [starts[i], starts[i] + period_seconds)
    period_seconds: float
    failures_device: npt.NDArray[np.object_]
    failures_ts: FloatArray


@dataclass
class PeriodMetrics:
    start_ts: float
    predictions: int
    hits: int
    precision: float | None
    failures: int
    caught: int


@dataclass
class ModelMetrics:
    precision_at_k: float | None
    recall: float | None
    predictions: int
    hits: int
    pr_auc: float | None
    median_lead_time_hours: float | None
    precision_std: float | None
    baseline_precision_same_volume: float | None = None
    periods: list[PeriodMetrics] = field(default_factory=list)
    # 95% bootstrap intervals per resampling ("devices", "days"): figure -> [low, high]
    intervals: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)
    noise_verdict: str = ""  # whether the ratio to static at equal volume lies inside the noise
    # calibrated risk (out-of-fold calibration per retrain): Brier score over the scored instances, the
    # reliability curve [(mean risk, observed failure share, instances)], the mean risk of the predictions
    brier: float | None = None
    reliability: list[list[float]] = field(default_factory=list)
    mean_risk_of_predictions: float | None = None

    @property
    def ratio_to_static(self) -> float | None:
        base = self.baseline_precision_same_volume
        if self.precision_at_k is None or not base:
            return None
        return self.precision_at_k / base

    def summary(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("periods")
        out["ratio_to_static"] = self.ratio_to_static
        return out


def average_precision(label: FloatArray, score: FloatArray) -> float | None:
    known = ~np.isnan(label)
    y = label[known]
    if y.sum() == 0 or y.sum() == len(y):
        return None
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(y, score[known]))


def evaluate(scored: Scored, chosen: IntArray, score: FloatArray, horizon_seconds: float) -> ModelMetrics:
    """Metrics of one model's chosen predictions (indices into `scored`) and its scores (for PR-AUC)."""
    hit = scored.label[chosen] == 1.0
    n_periods = len(scored.period_starts)
    preds = np.bincount(scored.period[chosen], minlength=n_periods)
    hits = np.bincount(scored.period[chosen], weights=hit.astype(np.float64), minlength=n_periods)
    start = float(scored.period_starts[0]) if n_periods else 0.0
    f_dev, f_ts = _failures_in_range(scored)
    caught = _earliest_catch(scored, chosen)
    caught_mask = caught_failures(scored, chosen)
    leads = [
        (f - caught[(d, float(f))]) / 3600.0
        for d, f in zip(f_dev[caught_mask], f_ts[caught_mask], strict=True)
    ]
    f_period = (
        np.floor((f_ts - start) / scored.period_seconds).astype(np.int64)
        if n_periods
        else f_ts.astype(np.int64)
    )
    periods = []
    for p in range(n_periods):
        in_p = f_period == p
        periods.append(
            PeriodMetrics(
                start_ts=float(scored.period_starts[p]),
                predictions=int(preds[p]),
                hits=int(hits[p]),
                precision=float(hits[p] / preds[p]) if preds[p] else None,
                failures=int(in_p.sum()),
                caught=int(caught_mask[in_p].sum()),
            )
        )
    per_period = [pm.precision for pm in periods if pm.precision is not None]
    total = len(chosen)
    return ModelMetrics(
        precision_at_k=float(hit.sum() / total) if total else None,
        recall=float(caught_mask.mean()) if len(caught_mask) else None,
        predictions=int(total),
        hits=int(hit.sum()),
        pr_auc=average_precision(scored.label, score),
        median_lead_time_hours=float(np.median(leads)) if leads else None,
        precision_std=float(np.std(per_period)) if len(per_period) > 1 else None,
        periods=periods,
    )


def _failures_in_range(scored: Scored) -> tuple[npt.NDArray[np.object_], FloatArray]:
    """The failures inside the scored periods (the ones recall counts)."""
    n_periods = len(scored.period_starts)
    start = float(scored.period_starts[0]) if n_periods else 0.0
    end = float(scored.period_starts[-1] + scored.period_seconds) if n_periods else 0.0
    in_range = (scored.failures_ts >= start) & (scored.failures_ts < end)
    return scored.failures_device[in_range], scored.failures_ts[in_range]


def _earliest_catch(scored: Scored, chosen: IntArray) -> dict[tuple[object, float], float]:
    """A hit's next failure is the failure it caught: the earliest catching prediction time per failure."""
    h_idx = chosen[scored.label[chosen] == 1.0]
    caught: dict[tuple[object, float], float] = {}
    for d, f, t in zip(scored.device_id[h_idx], scored.next_failure_ts[h_idx], scored.ts[h_idx], strict=True):
        key = (d, float(f))
        caught[key] = min(caught.get(key, np.inf), float(t))
    return caught


def caught_failures(scored: Scored, chosen: IntArray) -> npt.NDArray[np.bool_]:
    """For each failure inside the scored periods (in order), whether some prediction caught it."""
    f_dev, f_ts = _failures_in_range(scored)
    caught = _earliest_catch(scored, chosen)
    return np.array([(d, float(f)) in caught for d, f in zip(f_dev, f_ts, strict=True)], dtype=bool)


def precision_of(scored: Scored, chosen: IntArray) -> float | None:
    if len(chosen) == 0:
        return None
    return float((scored.label[chosen] == 1.0).mean())
