"""Honest backtest: walk the history, retrain every Δ on the last L_train of the past, score the next period.

`xgboost_static` is the study's baseline: one XGBoost trained on the first training window, never retrained.
The parallel ensemble's members are the single models of the same retrain (same data, same seeds), so it is
built from their scores rather than trained twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from predictor.dataset import Instances
from predictor.ensembles import CascadeEnsemble, normalised_rank
from predictor.metrics import (
    ModelMetrics,
    Scored,
    evaluate,
    intersect,
    precision_at_volume,
    select_top_k,
    volume_by_period,
)
from predictor.models import SINGLE_MODELS, make_model
from predictor.sliding import pick_train_window, training_indices

ALL_MODELS = ("xgboost", "mlp", "logistic", "random_forest", "parallel", "cascade")
PARALLEL_MEMBERS = ("xgboost", "random_forest", "logistic")


@dataclass(frozen=True)
class BacktestConfig:
    horizon_seconds: float = 7 * 86400.0
    train_window_seconds: float = 30 * 86400.0
    retrain_every_seconds: float = 7 * 86400.0
    period_seconds: float | None = None  # K applies per period; default: the retrain step
    step_seconds: float = 86400.0  # the dataset's instance step
    models: tuple[str, ...] = ALL_MODELS
    parallel_members: tuple[str, ...] = PARALLEL_MEMBERS
    train_window_candidates: tuple[
        float, ...
    ] = ()  # non-empty: pick L_train per retrain on a validation slice
    validation_seconds: float = 7 * 86400.0
    max_train_negatives: int = 100_000
    first_period_ts: float | None = None
    # False: score only periods whose outcomes the data already holds. True: score to the end of the data,
    # a prediction whose outcome is cut off counting as a miss (a lower bound on precision).
    score_censored: bool = False
    seed: int = 0
    n_jobs: int = 2

    @property
    def period(self) -> float:
        return self.period_seconds or self.retrain_every_seconds


@dataclass
class TrainRecord:
    """One retrain: when, on what (for the audit that training only saw the past)."""

    at_ts: float
    train_window_seconds: float
    rows: int
    positives: int
    max_train_ts: float
    max_label_failure_ts: float


@dataclass
class BacktestResult:
    scored: Scored
    scores: dict[str, npt.NDArray[np.float64]]
    config: BacktestConfig
    retrains: list[TrainRecord] = field(default_factory=list)


def _align(ts: float, step: float) -> float:
    return math.ceil(ts / step - 1e-9) * step


def scoring_range(inst: Instances, data_end_ts: float, config: BacktestConfig) -> tuple[float, float, int]:
    """(first period start, period length, number of periods) whose outcomes are known by the end of data."""
    data_start = float(inst.ts.min()) - config.step_seconds
    first = config.first_period_ts or _align(
        data_start + config.train_window_seconds + config.horizon_seconds, config.period
    )
    # The last instance of a scored period must have its whole horizon inside the data.
    last_instance_limit = data_end_ts - (0.0 if config.score_censored else config.horizon_seconds)
    n = math.floor((last_instance_limit + config.step_seconds - first) / config.period + 1e-9)
    return first, config.period, max(0, n)


def run_backtest(
    inst: Instances,
    failures_device: npt.NDArray[np.object_],
    failures_ts: npt.NDArray[np.float64],
    data_end_ts: float,
    config: BacktestConfig,
    progress: Callable[[Iterable[float]], Iterable[float]] = lambda it: it,
) -> BacktestResult:
    first, period, n_periods = scoring_range(inst, data_end_ts, config)
    if n_periods <= 0:
        raise ValueError(
            "history too short for a backtest: need train window + horizon + one period "
            f"(train window {config.train_window_seconds / 86400:g}d, "
            f"horizon {config.horizon_seconds / 86400:g}d)"
        )
    end = first + n_periods * period
    in_scope = (inst.ts >= first) & (inst.ts < end)
    sidx = np.flatnonzero(in_scope)
    scored = Scored(
        period=np.floor((inst.ts[sidx] - first) / period).astype(np.int64),
        device_id=inst.device_id[sidx],
        ts=inst.ts[sidx],
        label=inst.label[sidx],
        next_failure_ts=inst.next_failure_ts[sidx],
        period_starts=first + period * np.arange(n_periods, dtype=np.float64),
        period_seconds=period,
        failures_device=failures_device,
        failures_ts=failures_ts,
    )
    x_scored = inst.x[sidx]
    singles = [
        m
        for m in SINGLE_MODELS
        if m in config.models or ("parallel" in config.models and m in config.parallel_members)
    ]
    names = [*singles, *(["cascade"] if "cascade" in config.models else []), "xgboost_static"]
    scores = {n: np.full(len(sidx), np.nan) for n in names}
    retrains: list[TrainRecord] = []

    static_idx, static_y = training_indices(
        inst,
        first,
        config.train_window_seconds,
        config.horizon_seconds,
        config.max_train_negatives,
        config.seed,
    )
    _require_both_classes(static_y, first)
    static = make_model("xgboost", config.n_jobs)
    static.fit(inst.x[static_idx], static_y, config.seed)
    scores["xgboost_static"] = static.score(x_scored)

    retrain_at = list(np.arange(first, end, config.retrain_every_seconds, dtype=np.float64))
    for at in progress(retrain_at):
        in_batch = (scored.ts >= at) & (scored.ts < at + config.retrain_every_seconds)
        if not in_batch.any():
            continue
        window = config.train_window_seconds
        if config.train_window_candidates:
            picked = pick_train_window(
                inst,
                float(at),
                config.train_window_candidates,
                config.validation_seconds,
                config.horizon_seconds,
                config.max_train_negatives,
                config.seed,
                config.n_jobs,
            )
            window = picked if picked is not None else window
        idx, y = training_indices(
            inst, float(at), window, config.horizon_seconds, config.max_train_negatives, config.seed
        )
        _require_both_classes(y, float(at))
        retrains.append(_record(inst, float(at), window, idx, y))
        x_train, x_batch = inst.x[idx], x_scored[in_batch]
        for name in singles:
            model = make_model(name, config.n_jobs)
            model.fit(x_train, y, config.seed)
            scores[name][in_batch] = model.score(x_batch)
        if "cascade" in config.models:
            cascade = CascadeEnsemble.of(n_jobs=config.n_jobs)
            cascade.fit(x_train, y, config.seed)
            scores["cascade"][in_batch] = cascade.score(x_batch)
    return BacktestResult(scored, scores, config, retrains)


def _require_both_classes(y: npt.NDArray[np.float64], at: float) -> None:
    if y.sum() == 0 or y.sum() == len(y):
        raise ValueError(
            f"training set before {at:.0f} has {int(y.sum())} positives of {len(y)}: need both classes"
        )


def _record(
    inst: Instances, at: float, window: float, idx: npt.NDArray[np.int64], y: npt.NDArray[np.float64]
) -> TrainRecord:
    pos = idx[y == 1]
    return TrainRecord(
        at_ts=at,
        train_window_seconds=window,
        rows=len(idx),
        positives=int(y.sum()),
        max_train_ts=float(inst.ts[idx].max()),
        max_label_failure_ts=float(inst.next_failure_ts[pos].max()) if len(pos) else float("nan"),
    )


def summarise(result: BacktestResult, k: int) -> dict[str, ModelMetrics]:
    """Every model's metrics at K per period, each with the static baseline's precision at equal volume."""
    scored, scores, config = result.scored, result.scores, result.config
    h = config.horizon_seconds
    chosen: dict[str, npt.NDArray[np.int64]] = {}
    score_of: dict[str, npt.NDArray[np.float64]] = {}
    for name in ["xgboost_static", *[m for m in config.models if m in scores]]:
        chosen[name] = select_top_k(scored.period, scored.device_id, scores[name], k)
        score_of[name] = scores[name]
    if "parallel" in config.models:
        members = [m for m in config.parallel_members if m in scores]
        rank_avg = np.mean([ranks_within_periods(scores[m], scored.period) for m in members], axis=0)
        member_sel = [select_top_k(scored.period, scored.device_id, scores[m], k) for m in members]
        chosen["parallel"] = intersect(member_sel, scored.period, scored.device_id)
        score_of["parallel"] = rank_avg
        chosen["parallel_rank"] = select_top_k(scored.period, scored.device_id, rank_avg, k)
        score_of["parallel_rank"] = rank_avg
    out: dict[str, ModelMetrics] = {}
    for name, sel in chosen.items():
        metrics = evaluate(scored, sel, score_of[name], h)
        metrics.baseline_precision_same_volume = precision_at_volume(
            scored, scores["xgboost_static"], volume_by_period(scored, sel)
        )
        out[name] = metrics
    return out


def ranks_within_periods(
    scores: npt.NDArray[np.float64], period: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """Each score's normalised rank among its own period's scores: a period's picks must not depend on the
    scores of later periods (ranking the whole backtest at once would let them)."""
    out = np.empty(len(scores), dtype=np.float64)
    for p in np.unique(period):
        idx = np.flatnonzero(period == p)
        out[idx] = normalised_rank(scores[idx])
    return out


def format_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def to_json(result: BacktestResult, k: int, metrics: dict[str, ModelMetrics]) -> dict[str, Any]:
    """The issue's `--json` shape."""
    return {
        "k": k,
        "horizon": format_duration(result.config.horizon_seconds),
        "periods": len(result.scored.period_starts),
        "models": {name: m.summary() for name, m in metrics.items()},
    }


def parse_duration(text: str) -> float:
    """'7d', '12h', '30m', '45s' or plain seconds -> seconds."""
    units = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "w": 7 * 86400.0}
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError as exc:
        raise ValueError(f"not a duration: {text!r} (use e.g. 7d, 12h, 30m)") from exc
    if value <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return value


def horizon_hours(seconds: float) -> float:
    return seconds / 3600.0


def model_names(selected: Sequence[str]) -> tuple[str, ...]:
    unknown = [m for m in selected if m not in ALL_MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(ALL_MODELS)}")
    return tuple(selected)
