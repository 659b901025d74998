"""Calibration and the saved selection rule: monotone, fitted on the training window's out-of-fold scores
only, and the live selection the backtest's own."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.predict.contract import register_inputs
from fleetguard.predict.simulated_history import HistorySpec, generate
from predictor.calibration import (
    MIN_ISOTONIC_POSITIVES,
    Calibration,
    CalibrationKind,
    fit_calibration,
    out_of_fold_scores,
)
from predictor.dataset import DatasetSpec
from predictor.metrics import average_precision
from predictor.models import XGBoostModel
from predictor.risk_policy import risk_floor
from predictor.selection import SelectionRule, StepSelector, select_causal_k
from predictor.training import PolicyOptions, train_from_views


@pytest.mark.parametrize("positives", [MIN_ISOTONIC_POSITIVES + 20, 8])
def test_calibration_is_monotone_and_a_probability(positives: int) -> None:
    rng = np.random.default_rng(0)
    n = 2000
    y = np.zeros(n)
    y[rng.choice(n, positives, replace=False)] = 1.0
    scores = np.clip(0.3 * y + rng.random(n) * 0.7, 0, 1)
    cal = fit_calibration(scores, y)
    assert cal.kind is (
        CalibrationKind.ISOTONIC if positives >= MIN_ISOTONIC_POSITIVES else CalibrationKind.PLATT
    )
    grid = np.linspace(-0.5, 1.5, 500)
    risk = cal.apply(grid)
    assert np.all(np.diff(risk) >= -1e-12) and np.all((risk >= 0) & (risk <= 1))
    assert cal.base_rate == pytest.approx(positives / n)
    # a round trip through the model file keeps it exactly
    again = Calibration.from_dict(cal.to_dict())
    np.testing.assert_array_equal(again.apply(grid), risk)


def test_calibration_weights_undo_sampled_negatives() -> None:
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(100), np.zeros(900)]
    scores = rng.random(1000)
    # the 900 kept negatives stand for 9000: the window's failure share is 100 / 9100, not 100 / 1000
    cal = fit_calibration(scores, y, np.where(y > 0, 1.0, 10.0))
    assert cal.base_rate == pytest.approx(100 / 9100)
    assert float(np.mean(cal.apply(scores))) < 0.05


def test_out_of_fold_scores_never_see_their_own_device() -> None:
    # Each device has a feature that names it and one label for all its rows: a model that saw a device
    # memorises it. Scored out of fold, the name says nothing, so the scores carry no signal.
    rng = np.random.default_rng(2)
    devices = np.repeat(np.arange(60), 20)
    label_of = rng.random(60) < 0.3
    x = np.c_[devices, rng.normal(size=len(devices))].astype(np.float32)
    y = label_of[devices].astype(np.float64)
    ids = np.array([f"gpu-{d}" for d in devices], dtype=object)
    oof = out_of_fold_scores(lambda: XGBoostModel(n_estimators=40, n_jobs=1), x, y, ids, seed=0)
    in_sample = XGBoostModel(n_estimators=40, n_jobs=1)
    in_sample.fit(x, y, 0)
    leaked, honest = average_precision(y, in_sample.score(x)), average_precision(y, oof)
    assert leaked is not None and honest is not None
    assert leaked > 0.95  # what leaking would look like
    assert honest < 0.6


def test_risk_floor_reaches_the_target_precision_or_flags_nothing() -> None:
    risk = np.array([0.9, 0.8, 0.8, 0.5, 0.2, 0.1])
    y = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    w = np.ones(6)
    assert risk_floor(risk, y, w, 0.65) == 0.8  # 2 of 3 at >= 0.8; never a cut between the two 0.8s
    assert risk_floor(risk, y, w, 0.6) == 0.2  # the lowest level that still holds it: 3 of 5
    assert risk_floor(risk, y, w, 1.0) == 0.9
    assert risk_floor(risk, np.zeros(6), w, 0.1) == 1.0


def _write_history(tmp: Path, extra_failures: list[tuple[str, float]]) -> tuple[Path, Path]:
    samples, failures, _ = generate(HistorySpec(n_gpus=60, n_steps=24 * 20, failure_rate=0.5, seed=3))
    pq.write_table(samples, tmp / "samples.parquet")
    if extra_failures:
        more = pa.table(
            {
                "device_id": [d for d, _ in extra_failures],
                "ts": [t for _, t in extra_failures],
                "kind": ["xid_79"] * len(extra_failures),
            }
        )
        failures = pa.concat_tables([failures, more])
    pq.write_table(failures, tmp / "failures.parquet")
    return tmp / "samples.parquet", tmp / "failures.parquet"


def test_policy_is_fitted_on_the_training_window_only(tmp_path: Path) -> None:
    """Failures after the training window's end change nothing in the calibration or the selection rule."""
    spec = DatasetSpec(6 * 3600.0, 3 * 86400.0, step_seconds=3600.0)
    start = HistorySpec().start_ts
    end = start + 14 * 86400.0  # train on the first 14 of 20 days
    policies = []
    for name, extra in (
        ("plain", []),
        ("future", [(f"gpu-{i:06d}", end + 3600.0 * (i + 1)) for i in range(20)]),
    ):
        d = tmp_path / name
        d.mkdir()
        samples, failures = _write_history(d, extra)
        con = duckdb.connect()
        inputs = register_inputs(con, samples, failures)
        cols = tuple(c for c in inputs.feature_columns if c != "xid_count")
        trained = train_from_views(
            con, cols, "xgboost", spec, end, None, n_jobs=1, options=PolicyOptions(k=3)
        )
        con.close()
        assert trained.policy is not None
        policies.append(trained.policy.to_dict())
    assert policies[0] == policies[1]
    assert policies[0]["selection"]["k"] == 3 and policies[0]["calibration"]["positives"] > 0


_steps = st.lists(
    st.lists(st.tuples(st.integers(0, 7), st.floats(0, 1), st.booleans()), min_size=0, max_size=8),
    min_size=1,
    max_size=14,
)


@settings(max_examples=150, deadline=None)
@given(steps=_steps, k=st.integers(1, 5), steps_per_period=st.integers(1, 5), floor=st.booleans())
def test_live_selection_equals_the_backtests(
    steps: list[list[tuple[int, float, bool]]], k: int, steps_per_period: int, floor: bool
) -> None:
    step = 60.0
    period_seconds = step * steps_per_period
    t0 = 1_700_000_040.0 // period_seconds * period_seconds  # periods aligned to the epoch, as live
    ts_l, dev_l, score_l, ok_l = [], [], [], []
    for j, rows in enumerate(steps):
        seen = set()
        for d, s, ok in rows:
            if d in seen:
                continue  # one instance per device and step, as the features make
            seen.add(d)
            ts_l.append(t0 + j * step)
            dev_l.append(f"gpu-{d}")
            score_l.append(s)
            ok_l.append(ok or not floor)
    ts = np.asarray(ts_l, dtype=np.float64)
    dev = np.asarray(dev_l, dtype=object)
    score = np.asarray(score_l, dtype=np.float64)
    eligible = np.asarray(ok_l, dtype=bool)
    n_periods = math.ceil(len(steps) / steps_per_period)
    period = np.floor((ts - t0) / period_seconds + 1e-9).astype(np.int64)
    starts = t0 + period_seconds * np.arange(n_periods, dtype=np.float64)
    backtest = select_causal_k(period, ts, dev, score, k, starts, period_seconds, step, eligible)

    live = StepSelector(SelectionRule(k, period_seconds, step))
    picked = []
    for t in sorted(set(ts_l)):
        at = np.flatnonzero(ts == t)
        picked.extend(at[live.pick(t, dev[at], score[at], eligible[at])].tolist())
        assert live.pick(t, dev[at], score[at], eligible[at]).size == 0  # a step is picked from once
    assert sorted(picked) == backtest.tolist()
    for p in range(n_periods):
        in_p = backtest[period[backtest] == p]
        assert len(in_p) <= k and len(set(dev[in_p])) == len(in_p)
