"""Honest backtest: walk the history, retrain every Δ on the last L_train of the past, score the next period.

Every decision uses only what was known when it was made: a retrain at `at` learns from labels known at
`at`, keeps the event kinds frequent in its own training window, picks L_train on a slice before `at`, and
tunes the cascade on out-of-fold scores of that window; predictions are chosen at each instance time from
that time's scores (selection.py). `xgboost_static` is the study's baseline: one XGBoost trained on the
first training window, never retrained. The parallel ensemble's members are the single models of the same
retrain (same data, same seeds), so it is built from their scores rather than trained twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from predictor.calibration import (
    CalibrationError,
    brier_score,
    fit_calibration,
    negative_weights,
    out_of_fold_scores,
    reliability_curve,
)
from predictor.dataset import Instances
from predictor.defaults import explain_one_class
from predictor.durations import format_duration
from predictor.ensembles import CascadeEnsemble
from predictor.feature_choice import (
    Categories,
    EventLog,
    categories_in_rows,
    columns_for,
    dropped_categories,
    kinds_in_window,
)
from predictor.members import PARALLEL_MEMBERS, SINGLE_MODELS, make_single
from predictor.metrics import ModelMetrics, Scored, average_precision, evaluate, precision_of
from predictor.models import Model
from predictor.registry import ALL_MODELS
from predictor.selection import (
    intersect_causal,
    ranks_within_steps,
    select_at_volume,
    select_causal_k,
    volume_by_step,
)
from predictor.sliding import (
    labels_known_at,
    negatives_in_window,
    pick_train_window,
    training_indices,
)
from predictor.sliding_ensemble import (
    FULL_MEMBER,
    POOL_USERS,
    SUBSETS,
    SUBSETS_AVG,
    SUBSETS_RANK,
    XGBOOST_AVG,
    XGBOOST_GROW_AVG,
    RankHistory,
    Scorer,
    comparable_members,
    expanding_window,
    feature_subsets,
    mean_rank,
    stand_in_scores,
    subset_member_name,
)
from predictor.uncertainty import Resampling, bootstrap, verdict

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
# (training x, training labels, their instance indices, where the scored rows go, their raw scores)
Calibrating = tuple[npt.NDArray[np.float32], FloatArray, IntArray, IntArray | slice, FloatArray]


class BacktestError(ValueError):
    """A backtest that cannot run with these settings; the message says what would."""


@dataclass(frozen=True)
class BacktestConfig:
    horizon_seconds: float = 7 * 86400.0
    train_window_seconds: float = 30 * 86400.0
    retrain_every_seconds: float = 7 * 86400.0
    period_seconds: float | None = None  # K applies per period, spent as it runs; default: one step
    step_seconds: float = 86400.0  # the dataset's instance step
    models: tuple[str, ...] = ALL_MODELS
    parallel_members: tuple[str, ...] = PARALLEL_MEMBERS
    # non-empty: pick L_train per retrain on a validation slice before the retrain
    train_window_candidates: tuple[float, ...] = ()
    validation_seconds: float = 7 * 86400.0
    max_train_negatives: int = 100_000
    first_period_ts: float | None = None
    # False: score only periods whose outcomes the data already holds. True: score to the end of the data,
    # a prediction whose outcome is cut off counting as a miss (a lower bound on precision).
    score_censored: bool = False
    # Event kinds the instances carry columns for (in order of first appearance), and how many of them a
    # retrain keeps: the most frequent in its own training window.
    candidate_event_kinds: tuple[str, ...] = ()
    max_event_kinds: int = 8
    # Text columns' values the instances carry 0/1 columns for, and how many per column a retrain keeps:
    # the most frequent among its own training rows (an encoding fixed on the training window).
    candidate_categories: Categories = ()
    max_categories: int = 10
    seed: int = 0
    # One thread per fit: a backtest's fits are many and small, and on a busy host OpenMP workers spin-wait
    # for a core someone else holds. The README's evaluate (80 GPUs x 40 days) took 31-52 s with one thread
    # and 64-67 s with two, load 3.4-4.3, reporting the same table (BENCHMARKS.md).
    n_jobs: int = 1
    # Calibrate each retrain's models on out-of-fold scores of their own training window (three more fits
    # per model and retrain), so the backtest reports calibrated risk and its Brier score.
    calibrate: bool = True
    # The sliding ensembles (predictor.sliding_ensemble; backtest-only names `subsets`, `subsets_rank`,
    # `xgboost_avg`, `subsets_avg`), fixed before any scored day was looked at (BENCHMARKS.md, issue 18):
    subset_members: int = 3  # XGBoost members on feature subsets, besides the full XGBoost
    member_min_ratio: float = 0.5  # a member stays when its validation PR-AUC is >= this x the best's
    validation_max_negatives: int = 10_000  # negatives of a member's validation fit (4 of them per retrain)
    rank_average_retrains: int = 3  # R: the retrains whose ranks `*_avg` average (this one and R - 1 before)
    # `xgboost_grow_avg`'s expanding window: everything known from the data's first instance, at most this
    grow_max_train_seconds: float = 30 * 86400.0

    @property
    def period(self) -> float:
        return self.period_seconds or self.step_seconds


@dataclass
class TrainRecord:
    """One retrain: when, on what (for the audit that training only saw the past)."""

    at_ts: float
    train_window_seconds: float
    event_kinds: tuple[str, ...]
    rows: int
    positives: int
    max_train_ts: float
    max_label_failure_ts: float


@dataclass
class BacktestResult:
    scored: Scored
    scores: dict[str, FloatArray]
    config: BacktestConfig
    retrains: list[TrainRecord] = field(default_factory=list)
    # calibrated risk per model (NaN where a retrain could not be calibrated); empty without calibration
    risk: dict[str, FloatArray] = field(default_factory=dict)
    # per pool member, the scores the `subsets` intersection uses (stand-ins where a retrain left it out)
    intersection_scores: dict[str, FloatArray] = field(default_factory=dict)
    # per retrain of the pool, the members it kept
    kept_members: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    # the expanding-window retrains of `xgboost_grow_avg` (those before the first scored period included)
    grow_retrains: list[TrainRecord] = field(default_factory=list)


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
    failures_ts: FloatArray,
    data_end_ts: float,
    config: BacktestConfig,
    progress: Callable[[Iterable[float]], Iterable[float]] = lambda it: it,
    events: EventLog | None = None,
) -> BacktestResult:
    """Walk the history: at each retrain time `at`, fit on what was known at `at` and score the instances
    up to the next retrain. No input of a fit or a choice comes from after `at`."""
    events = events or EventLog.empty()
    first, period, n_periods = scoring_range(inst, data_end_ts, config)
    if n_periods <= 0:
        raise BacktestError("history too short for a backtest: need train window + horizon + one period")
    end = first + n_periods * period
    sidx = np.flatnonzero((inst.ts >= first) & (inst.ts < end))
    scored = Scored(
        period=np.floor((inst.ts[sidx] - first) / period + 1e-9).astype(np.int64),
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
    use_pool = bool(POOL_USERS & set(config.models))
    use_avg = XGBOOST_AVG in config.models or SUBSETS_AVG in config.models
    if (use_pool or use_avg) and FULL_MEMBER not in singles:
        singles.append(FULL_MEMBER)
    pool_names = [FULL_MEMBER, *(subset_member_name(i) for i in range(config.subset_members))]
    sliding = [m for m in (SUBSETS_RANK, XGBOOST_AVG, SUBSETS_AVG, XGBOOST_GROW_AVG) if m in config.models]
    names = [
        *singles,
        *(["cascade"] if "cascade" in config.models else []),
        "xgboost_static",
        *(pool_names[1:] if use_pool else []),
        *sliding,
    ]
    scores = {n: np.full(len(sidx), np.nan) for n in names}
    intersection = {n: np.full(len(sidx), np.nan) for n in pool_names} if SUBSETS in config.models else {}
    kept_log: list[tuple[float, tuple[str, ...]]] = []
    full_history = RankHistory(config.rank_average_retrains)
    pool_history = RankHistory(config.rank_average_retrains)
    grow_history = RankHistory(config.rank_average_retrains)
    grow_records: list[TrainRecord] = []
    retrains: list[TrainRecord] = []

    static_idx, static_y = training_indices(
        inst,
        first,
        config.train_window_seconds,
        config.horizon_seconds,
        config.max_train_negatives,
        config.seed,
    )
    require_both_classes(static_y, first, config.train_window_seconds, config)
    static_cols = _columns(inst, events, first, config.train_window_seconds, static_idx, config)[1]
    static = make_single("xgboost", config.n_jobs)
    static.fit(inst.x[np.ix_(static_idx, static_cols)], static_y, config.seed)
    scores["xgboost_static"] = static.score(x_scored[:, static_cols])
    risk = {n: np.full(len(sidx), np.nan) for n in names} if config.calibrate else {}

    def calibrate(name: str, make: Callable[[], Model], at: float, window: float, rows: Calibrating) -> None:
        if not config.calibrate:
            return
        x_train, y, idx, where, raw = rows
        all_negatives = negatives_in_window(inst, at, window, config.horizon_seconds)
        try:
            oof = out_of_fold_scores(make, x_train, y, inst.device_id[idx], config.seed)
            cal = fit_calibration(oof, y, negative_weights(y, int((y == 0).sum()), all_negatives))
        except CalibrationError:
            return  # this retrain's risk stays unknown (NaN), its ranking is unaffected
        risk[name][where] = cal.apply(raw)

    calibrate(
        "xgboost_static",
        lambda: make_single("xgboost", config.n_jobs),
        first,
        config.train_window_seconds,
        (
            inst.x[np.ix_(static_idx, static_cols)],
            static_y,
            static_idx,
            slice(None),
            scores["xgboost_static"],
        ),
    )

    def fit_pool(
        at: float, window: float, cols: IntArray, full: Model | None
    ) -> tuple[dict[str, Scorer], tuple[str, ...]]:
        """The pool a retrain at `at` fits: the full XGBoost (`full` when the singles fitted it) and, when
        a pool model was asked for, the subset members; and the names it keeps (above the strength bar)."""
        if full is None:
            idx, y = training_indices(
                inst, at, window, config.horizon_seconds, config.max_train_negatives, config.seed
            )
            full = make_single(FULL_MEMBER, config.n_jobs)
            full.fit(inst.x[np.ix_(idx, cols)], y, config.seed)
        pool: dict[str, Scorer] = {FULL_MEMBER: (cols, full)}
        if not use_pool:
            return pool, (FULL_MEMBER,)
        for i, sub in enumerate(feature_subsets(len(cols), config.subset_members, config.seed)):
            # each member draws its own negatives: members differ by data as well as by columns
            idx, y = training_indices(
                inst, at, window, config.horizon_seconds, config.max_train_negatives, config.seed + 1 + i
            )
            if y.sum() == 0 or y.sum() == len(y):
                continue
            model = make_single("xgboost", config.n_jobs)
            model.fit(inst.x[np.ix_(idx, cols[sub])], y, config.seed + 1 + i)
            pool[subset_member_name(i)] = (cols[sub], model)
        kept = comparable_members(
            validation_pr_auc(inst, at, window, {n: c for n, (c, _) in pool.items()}, config),
            config.member_min_ratio,
        )
        kept_log.append((at, kept))
        return pool, kept

    def fit_grow(at: float) -> None:
        """`xgboost_grow_avg`'s retrain at `at`: XGBoost on everything known from the first instance on
        (capped), pushed onto its rank history; a window without both classes adds no model."""
        window = expanding_window(float(inst.ts.min()), at, config.grow_max_train_seconds)
        idx, y = training_indices(
            inst, at, window, config.horizon_seconds, config.max_train_negatives, config.seed
        )
        if y.sum() == 0 or y.sum() == len(y):
            return
        kinds, cols = _columns(inst, events, at, window, idx, config)
        model = make_single(FULL_MEMBER, config.n_jobs)
        model.fit(inst.x[np.ix_(idx, cols)], y, config.seed)
        grow_history.push([(cols, model)])
        grow_records.append(_record(inst, at, window, kinds, idx, y))

    retrain_at = list(np.arange(first, end, config.retrain_every_seconds, dtype=np.float64))
    if XGBOOST_GROW_AVG in scores:
        for j in range(config.rank_average_retrains - 1, 0, -1):
            fit_grow(first - j * config.retrain_every_seconds)
    if use_avg:
        # The R - 1 retrains before the first scored period, so its steps are averaged like any other.
        for j in range(config.rank_average_retrains - 1, 0, -1):
            before = first - j * config.retrain_every_seconds
            window = _train_window(inst, before, config)
            idx, y = training_indices(
                inst, before, window, config.horizon_seconds, config.max_train_negatives, config.seed
            )
            if y.sum() == 0 or y.sum() == len(y):
                continue  # too early for a model: the average starts with fewer retrains
            cols = _columns(inst, events, before, window, idx, config)[1]
            pool, kept = fit_pool(before, window, cols, None)
            full_history.push([pool[FULL_MEMBER]])
            pool_history.push([pool[n] for n in kept])
    for at in progress(retrain_at):
        in_batch = np.flatnonzero((scored.ts >= at) & (scored.ts < at + config.retrain_every_seconds))
        if len(in_batch) == 0:
            continue
        window = _train_window(inst, float(at), config)
        idx, y = training_indices(
            inst, float(at), window, config.horizon_seconds, config.max_train_negatives, config.seed
        )
        require_both_classes(y, float(at), window, config)
        kinds, cols = _columns(inst, events, float(at), window, idx, config)
        retrains.append(_record(inst, float(at), window, kinds, idx, y))
        x_train, x_batch = inst.x[np.ix_(idx, cols)], x_scored[np.ix_(in_batch, cols)]
        fitted: dict[str, Model] = {}
        for name in singles:
            model = make_single(name, config.n_jobs)
            model.fit(x_train, y, config.seed)
            fitted[name] = model
            scores[name][in_batch] = model.score(x_batch)
            calibrate(
                name,
                lambda name=name: make_single(name, config.n_jobs),  # type: ignore[misc]
                float(at),
                window,
                (x_train, y, idx, in_batch, scores[name][in_batch]),
            )
        if "cascade" in config.models:
            cascade = CascadeEnsemble.of(n_jobs=config.n_jobs)
            cascade.fit(x_train, y, config.seed)
            scores["cascade"][in_batch] = cascade.score(x_batch)
            calibrate(
                "cascade",
                lambda: CascadeEnsemble.of(n_jobs=config.n_jobs),
                float(at),
                window,
                (x_train, y, idx, in_batch, scores["cascade"][in_batch]),
            )
        if use_pool or use_avg:
            pool, kept = fit_pool(float(at), window, cols, fitted.get(FULL_MEMBER))
            ts_batch, x_rows = scored.ts[in_batch], x_scored[in_batch]
            member = {n: model.score(x_rows[:, c]) for n, (c, model) in pool.items()}
            for n in pool_names[1:]:
                if n in member and n in scores:
                    scores[n][in_batch] = member[n]
            consensus = mean_rank([member[n] for n in kept], ts_batch)
            if SUBSETS_RANK in scores:
                scores[SUBSETS_RANK][in_batch] = consensus
            for n, s in stand_in_scores(pool_names, kept, member, consensus).items():
                if n in intersection:
                    intersection[n][in_batch] = s
            full_history.push([pool[FULL_MEMBER]])
            pool_history.push([pool[n] for n in kept])
            if XGBOOST_AVG in scores:
                scores[XGBOOST_AVG][in_batch] = full_history.average(x_rows, ts_batch)
            if SUBSETS_AVG in scores:
                scores[SUBSETS_AVG][in_batch] = pool_history.average(x_rows, ts_batch)
        if XGBOOST_GROW_AVG in scores:
            fit_grow(float(at))
            scores[XGBOOST_GROW_AVG][in_batch] = grow_history.average(x_scored[in_batch], scored.ts[in_batch])
    return BacktestResult(scored, scores, config, retrains, risk, intersection, kept_log, grow_records)


def validation_pr_auc(
    inst: Instances, at: float, window: float, member_columns: dict[str, IntArray], config: BacktestConfig
) -> dict[str, float | None]:
    """Each pool member's PR-AUC on the validation slice before `at`: fitted on what was known at the
    slice's start, scored on the slice [at - H - V, at - H), whose labels are known at `at` (the slice of
    predictor.sliding.pick_train_window, so nothing from the scoring period). None for every member when the
    slice lacks a class."""
    val_end = at - config.horizon_seconds
    val_start = val_end - config.validation_seconds
    labels = labels_known_at(inst, at, config.horizon_seconds)
    val = np.flatnonzero((inst.ts >= val_start) & (inst.ts < val_end) & ~np.isnan(labels))
    if len(val) == 0 or labels[val].sum() == 0 or labels[val].sum() == len(val):
        return dict.fromkeys(member_columns)
    out: dict[str, float | None] = {}
    for i, (name, cols) in enumerate(member_columns.items()):
        idx, y = training_indices(
            inst, val_start, window, config.horizon_seconds, config.validation_max_negatives, config.seed + i
        )
        if y.sum() == 0 or y.sum() == len(y):
            out[name] = None
            continue
        model = make_single("xgboost", config.n_jobs)
        model.fit(inst.x[np.ix_(idx, cols)], y, config.seed + i)
        out[name] = average_precision(labels[val], model.score(inst.x[np.ix_(val, cols)]))
    return out


def retrain_summary(name: str, records: Sequence[TrainRecord]) -> str:
    """One line: a model's retrains, the days their windows spanned and the positives they trained on."""
    if not records:
        return f"{name}: no retrains"
    days = [r.train_window_seconds / 86400.0 for r in records]
    pos = [r.positives for r in records]
    return (
        f"{name}: {len(records)} retrains, windows {min(days):.0f}-{max(days):.0f} d, "
        f"positives {min(pos)}-{max(pos)} (mean {np.mean(pos):.1f})"
    )


def _columns(
    inst: Instances, events: EventLog, at: float, window: float, idx: IntArray, config: BacktestConfig
) -> tuple[tuple[str, ...], IntArray]:
    """The event kinds a retrain at `at` keeps and its category encoding (both from its own training
    window), and the feature columns that follow."""
    kinds = kinds_in_window(events, at - window, at, config.max_event_kinds)
    kept = categories_in_rows(
        inst.feature_names, config.candidate_categories, inst.x[idx], config.max_categories
    )
    drop = dropped_categories(config.candidate_categories, kept)
    return kinds, columns_for(inst.feature_names, config.candidate_event_kinds, kinds, drop)


def _train_window(inst: Instances, at: float, config: BacktestConfig) -> float:
    if not config.train_window_candidates:
        return config.train_window_seconds
    picked = pick_train_window(
        inst,
        at,
        config.train_window_candidates,
        config.validation_seconds,
        config.horizon_seconds,
        config.max_train_negatives,
        config.seed,
        config.n_jobs,
    )
    return picked if picked is not None else config.train_window_seconds


def require_both_classes(y: FloatArray, at: float, window: float, config: BacktestConfig) -> None:
    """A training set needs positives and negatives; the error says which is missing and what would help."""
    if y.sum() == 0 or y.sum() == len(y):
        raise BacktestError(explain_one_class(at, int(y.sum()), len(y), window, config.horizon_seconds))


def _record(
    inst: Instances, at: float, window: float, kinds: tuple[str, ...], idx: IntArray, y: FloatArray
) -> TrainRecord:
    pos = idx[y == 1]
    return TrainRecord(
        at_ts=at,
        train_window_seconds=window,
        event_kinds=kinds,
        rows=len(idx),
        positives=int(y.sum()),
        max_train_ts=float(inst.ts[idx].max()),
        max_label_failure_ts=float(inst.next_failure_ts[pos].max()) if len(pos) else float("nan"),
    )


def summarise(result: BacktestResult, k: int) -> dict[str, ModelMetrics]:
    """Every model's metrics at K per period (chosen causally), each with the static baseline's precision
    when it makes as many predictions at every time step."""
    scored, scores, config = result.scored, result.scores, result.config

    def top_k(score: FloatArray) -> IntArray:
        return select_causal_k(
            scored.period,
            scored.ts,
            scored.device_id,
            score,
            k,
            scored.period_starts,
            scored.period_seconds,
            config.step_seconds,
        )

    chosen: dict[str, IntArray] = {}
    score_of: dict[str, FloatArray] = {}
    for name in ["xgboost_static", *[m for m in config.models if m in scores]]:
        chosen[name] = top_k(scores[name])
        score_of[name] = scores[name]
    if "parallel" in config.models:
        members = [m for m in config.parallel_members if m in scores]
        rank_avg = np.mean([ranks_within_steps(scores[m], scored.ts) for m in members], axis=0)
        member_sel = [top_k(scores[m]) for m in members]
        chosen["parallel"] = intersect_causal(member_sel, scored.period, scored.ts, scored.device_id)
        score_of["parallel"] = rank_avg
        chosen["parallel_rank"] = top_k(rank_avg)
        score_of["parallel_rank"] = rank_avg
    if SUBSETS in config.models and result.intersection_scores:
        pool_scores = list(result.intersection_scores.values())
        chosen[SUBSETS] = intersect_causal(
            [top_k(s) for s in pool_scores], scored.period, scored.ts, scored.device_id
        )
        score_of[SUBSETS] = mean_rank(pool_scores, scored.ts)
    out: dict[str, ModelMetrics] = {}
    for name, sel in chosen.items():
        metrics = evaluate(scored, sel, score_of[name], config.horizon_seconds)
        volume = volume_by_step(scored.period, scored.ts, sel)
        baseline = select_at_volume(
            scored.period, scored.ts, scored.device_id, scores["xgboost_static"], volume
        )
        metrics.baseline_precision_same_volume = precision_of(scored, baseline)
        by_resampling = {
            r: bootstrap(scored, sel, baseline, r, seed=config.seed)
            for r in (Resampling.DEVICES, Resampling.DAYS)
        }
        metrics.intervals = {r.value: iv.as_dict() for r, iv in by_resampling.items()}
        if name in result.risk:
            _calibration_figures(metrics, result.risk[name], scored.label, sel)
        metrics.noise_verdict = (
            "the baseline" if name == "xgboost_static" else verdict(metrics.ratio_to_static, by_resampling)
        )
        out[name] = metrics
    return out


def _calibration_figures(
    metrics: ModelMetrics, risk: FloatArray, label: FloatArray, chosen: IntArray
) -> None:
    known = ~np.isnan(label) & ~np.isnan(risk)
    metrics.brier = brier_score(risk[known], label[known]) if known.any() else None
    metrics.reliability = [list(p) for p in reliability_curve(risk[known], label[known])]
    picked = risk[chosen]
    metrics.mean_risk_of_predictions = float(np.nanmean(picked)) if np.isfinite(picked).any() else None


def to_json(result: BacktestResult, k: int, metrics: dict[str, ModelMetrics]) -> dict[str, Any]:
    """The issue's `--json` shape."""
    return {
        "k": k,
        "horizon": format_duration(result.config.horizon_seconds),
        "period": format_duration(result.config.period),
        "periods": len(result.scored.period_starts),
        "models": {name: m.summary() for name, m in metrics.items()},
    }
