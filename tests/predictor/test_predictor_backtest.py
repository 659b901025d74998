"""Sliding backtest: only the past trains each model; the history is walked to the end; JSON shape."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pytest

from fleetguard.predict.contract import register_inputs
from predictor.backtest import BacktestConfig, BacktestResult, run_backtest, summarise, to_json
from predictor.dataset import (
    DatasetSpec,
    Instances,
    build_instances,
    data_end_ts,
    fetch_failures,
    fetch_instances,
)
from predictor.sliding import labels_known_at

if TYPE_CHECKING:
    from tests.predictor.conftest import History

DAY = 86400.0


@pytest.fixture(scope="module")
def instances(small_history: History) -> tuple[Instances, np.ndarray, np.ndarray, float]:
    con = duckdb.connect()
    inputs = register_inputs(con, small_history.samples, small_history.failures)
    names = build_instances(con, inputs.feature_columns, DatasetSpec())
    f_dev, f_ts = fetch_failures(con)
    return fetch_instances(con, names), f_dev, f_ts, data_end_ts(con)


@pytest.fixture(scope="module")
def result(instances: tuple[Instances, np.ndarray, np.ndarray, float]) -> BacktestResult:
    inst, f_dev, f_ts, end = instances
    config = BacktestConfig(
        train_window_seconds=14 * DAY,
        retrain_every_seconds=7 * DAY,
        period_seconds=DAY,
        n_jobs=1,
        models=("xgboost", "logistic", "parallel", "cascade"),
        parallel_members=("xgboost", "logistic"),
    )
    return run_backtest(inst, f_dev, f_ts, end, config)


def test_every_retrain_learns_only_from_before_its_period(result: BacktestResult) -> None:
    assert result.retrains
    for r in result.retrains:
        assert r.max_train_ts < r.at_ts
        assert r.max_label_failure_ts < r.at_ts


def test_labels_known_at_a_time_use_no_later_failure(
    instances: tuple[Instances, np.ndarray, np.ndarray, float],
) -> None:
    inst = instances[0]
    at = float(np.median(inst.ts))
    known = labels_known_at(inst, at, 7 * DAY)
    assert np.all(inst.next_failure_ts[known == 1] < at)
    assert np.all(inst.ts[known == 0] + 7 * DAY <= at)


def test_the_backtest_walks_the_history_to_the_last_known_period(
    result: BacktestResult, instances: tuple[Instances, np.ndarray, np.ndarray, float]
) -> None:
    end = instances[3]
    starts = result.scored.period_starts
    assert len(starts) > 20
    assert starts[-1] + 7 * DAY <= end
    assert not np.isnan(result.scored.label).any()  # every scored outcome is known
    assert {r.at_ts for r in result.retrains} == set(np.arange(starts[0], starts[-1] + DAY, 7 * DAY))


def test_every_model_scores_every_instance_of_every_period(result: BacktestResult) -> None:
    for name, s in result.scores.items():
        assert not np.isnan(s).any(), name


def test_json_has_the_issues_shape(result: BacktestResult) -> None:
    out = to_json(result, 5, summarise(result, 5))
    assert out["k"] == 5 and out["horizon"] == "7d" and out["periods"] == len(result.scored.period_starts)
    expected = {
        "precision_at_k",
        "recall",
        "predictions",
        "hits",
        "pr_auc",
        "median_lead_time_hours",
        "precision_std",
        "baseline_precision_same_volume",
        "ratio_to_static",
        "intervals",
        "noise_verdict",
        "brier",
        "reliability",
        "mean_risk_of_predictions",
    }
    assert {"xgboost_static", "xgboost", "logistic", "parallel", "cascade"} <= set(out["models"])
    for metrics in out["models"].values():
        assert set(metrics) == expected
        assert set(metrics["intervals"]) == {"devices", "days"}
        for figures in metrics["intervals"].values():
            lo, hi = figures["precision_at_k"]
            assert lo is not None and hi is not None and lo <= metrics["precision_at_k"] <= hi
        assert metrics["noise_verdict"]
    for name in ("xgboost_static", "xgboost", "logistic", "cascade"):
        calibrated = out["models"][name]
        assert 0.0 <= calibrated["brier"] <= 0.25  # better than a coin at a few percent of positives
        assert calibrated["reliability"] and all(
            0 <= r <= 1 and 0 <= f <= 1 for r, f, _ in calibrated["reliability"]
        )
    json.dumps(out)  # plain JSON, no numpy values


def test_intersection_never_predicts_more_than_k_per_period(result: BacktestResult) -> None:
    metrics = summarise(result, 5)
    assert all(p.predictions <= 5 for p in metrics["parallel"].periods)
    assert metrics["xgboost"].predictions == 5 * len(result.scored.period_starts)


def test_sliding_beats_the_static_baseline_on_a_drifting_fleet(result: BacktestResult) -> None:
    metrics = summarise(result, 5)
    sliding, static = metrics["xgboost"].precision_at_k, metrics["xgboost_static"].precision_at_k
    assert sliding is not None and static is not None
    assert sliding > static


def test_too_short_a_history_is_a_clear_error(
    instances: tuple[Instances, np.ndarray, np.ndarray, float],
) -> None:
    inst, f_dev, f_ts, end = instances
    with pytest.raises(ValueError, match="history too short"):
        run_backtest(inst, f_dev, f_ts, end, BacktestConfig(train_window_seconds=90 * DAY))
