"""The sliding ensembles' pieces: which columns a member sees, which members a retrain keeps, how ranks
combine across members and retrains."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.backtest import BacktestConfig, BacktestResult, retrain_summary, run_backtest, summarise
from predictor.dataset import Instances
from predictor.models import XGBoostModel
from predictor.sliding_ensemble import (
    RankHistory,
    comparable_members,
    expanding_window,
    feature_subsets,
    kept_summary,
    mean_rank,
    stand_in_scores,
)


@given(n_columns=st.integers(0, 60), members=st.integers(1, 6), seed=st.integers(0, 1000))
@settings(max_examples=200, deadline=None)
def test_every_column_is_seen_by_all_members_but_one(n_columns: int, members: int, seed: int) -> None:
    subsets = feature_subsets(n_columns, members, seed)
    assert len(subsets) == members
    seen = np.zeros(n_columns, dtype=int)
    for cols in subsets:
        assert np.all(np.diff(cols) > 0)  # sorted, no column twice
        seen[cols] += 1
    if members > 1 and n_columns >= members:
        assert np.all(seen == members - 1)
        sizes = [len(c) for c in subsets]
        assert max(sizes) - min(sizes) <= 1  # comparable: each member leaves out about 1/members
    else:
        assert np.all(seen == members)
    # fixed by the seed, not by any data
    again = feature_subsets(n_columns, members, seed)
    assert all(np.array_equal(a, b) for a, b in zip(subsets, again, strict=True))


def test_members_below_the_strength_bar_are_dropped() -> None:
    ap = {"xgboost": 0.40, "xgboost_sub0": 0.30, "xgboost_sub1": 0.19, "xgboost_sub2": None}
    assert comparable_members(ap, 0.5) == ("xgboost", "xgboost_sub0")
    assert comparable_members(ap, 0.0) == ("xgboost", "xgboost_sub0", "xgboost_sub1")


def test_a_slice_that_ranks_nothing_keeps_the_whole_pool() -> None:
    assert comparable_members({"a": None, "b": None}, 0.5) == ("a", "b")
    assert comparable_members({"a": float("nan"), "b": None}, 0.9) == ("a", "b")


def test_ranks_are_averaged_within_each_time_step() -> None:
    ts = np.array([0.0, 0.0, 0.0, 1.0, 1.0])
    a = np.array([0.1, 0.2, 0.3, 5.0, 1.0])
    b = np.array([3.0, 2.0, 1.0, 5.0, 1.0])
    out = mean_rank([a, b], ts)
    # step 0: a ranks 1/3, 2/3, 1 and b ranks 1, 2/3, 1/3 -> all 2/3; step 1: both agree
    np.testing.assert_allclose(out, [2 / 3, 2 / 3, 2 / 3, 1.0, 0.5])
    assert np.isnan(mean_rank([], ts)).all()


def test_a_member_left_out_stands_in_with_the_consensus() -> None:
    member = {"x": np.array([1.0, 2.0]), "y": np.array([2.0, 1.0])}
    consensus = np.array([0.5, 0.5])
    out = stand_in_scores(["x", "y", "z"], ["x"], member, consensus)
    np.testing.assert_array_equal(out["x"], member["x"])
    np.testing.assert_array_equal(out["y"], consensus)  # trained, but not kept this retrain
    np.testing.assert_array_equal(out["z"], consensus)  # not trained at all


def test_rank_history_keeps_only_the_last_retrains_and_averages_them() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = (x[:, 0] + 0.1 * rng.normal(size=300) > 1.0).astype(np.float64)
    models = []
    for seed in range(3):
        m = XGBoostModel(n_estimators=10, n_jobs=1)
        m.fit(x, y, seed)
        models.append(m)
    history = RankHistory(depth=2)
    cols = np.arange(3, dtype=np.int64)
    for m in models:
        history.push([(cols, m)])
    assert len(history) == 2
    assert [model for _, model in history.scorers()] == models[1:]
    ts = np.zeros(len(x))
    expected = mean_rank([models[1].score(x), models[2].score(x)], ts)
    np.testing.assert_allclose(history.average(x, ts), expected)


DAY = 86400.0


def _fleet(extra_failures_after: float | None = None) -> Instances:
    """60 devices over 42 days, one instance a day; a quarter fail, their first feature rising in the week
    before. With `extra_failures_after`, ten more devices fail after that time: the future made different
    (their labels and failure times change, their features up to then do not)."""
    rng = np.random.default_rng(11)
    n_dev, n_days = 60, 42
    fail_day = np.where(rng.random(n_dev) < 0.25, rng.uniform(10, n_days, n_dev), np.inf)
    noise = rng.normal(size=(n_dev, n_days, 4))
    ends = fail_day.copy()
    if extra_failures_after is not None:
        late = np.flatnonzero(np.isinf(fail_day))[:10]
        ends[late] = np.random.default_rng(12).uniform(extra_failures_after / DAY + 1, n_days, len(late))
    rows = []
    for d in range(n_dev):
        for day in range(n_days):
            if day >= ends[d]:
                break
            signal = max(0.0, 7 - (fail_day[d] - day)) if np.isfinite(fail_day[d]) else 0.0
            z = noise[d, day]
            rows.append((d, day, signal + z[0], z[1], z[2] + 0.3 * signal, z[3], ends[d]))
    arr = np.asarray(rows, dtype=np.float64)
    ts = arr[:, 1] * DAY
    next_fail = arr[:, 6] * DAY
    label = np.where(next_fail - ts <= 7 * DAY, 1.0, 0.0)
    return Instances(
        device_id=np.asarray([f"gpu-{int(d)}" for d in arr[:, 0]], dtype=object),
        ts=ts,
        label=label,
        next_failure_ts=next_fail,
        x=arr[:, 2:6].astype(np.float32),
        feature_names=("a", "b", "c", "d"),
    )


def _backtest(inst: Instances, grow_max_days: float = 30.0) -> BacktestResult:
    f_dev = np.unique(inst.device_id[np.isfinite(inst.next_failure_ts)])
    f_ts = np.asarray([inst.next_failure_ts[inst.device_id == d][0] for d in f_dev], dtype=np.float64)
    config = BacktestConfig(
        horizon_seconds=7 * DAY,
        train_window_seconds=14 * DAY,
        retrain_every_seconds=7 * DAY,
        validation_seconds=7 * DAY,
        models=("subsets", "subsets_rank", "xgboost_avg", "subsets_avg", "xgboost_grow_avg"),
        subset_members=2,
        rank_average_retrains=2,
        grow_max_train_seconds=grow_max_days * DAY,
        calibrate=False,
        n_jobs=1,
    )
    return run_backtest(inst, f_dev.astype(object), f_ts, float(inst.ts.max()) + DAY, config)


def test_the_sliding_ensembles_use_nothing_from_after_their_retrain() -> None:
    cut = 30 * DAY
    a, b = _backtest(_fleet()), _backtest(_fleet(extra_failures_after=cut))
    early_a, early_b = a.scored.ts < cut, b.scored.ts < cut
    assert early_a.sum() == early_b.sum() > 0
    assert {
        "xgboost_sub0",
        "xgboost_sub1",
        "subsets_rank",
        "xgboost_avg",
        "subsets_avg",
        "xgboost_grow_avg",
    } <= a.scores.keys()
    for name, scores in a.scores.items():
        assert not np.isnan(scores).any(), name  # every scored instance ranked
        np.testing.assert_array_equal(scores[early_a], b.scores[name][early_b], err_msg=name)
    assert a.intersection_scores.keys() == {"xgboost", "xgboost_sub0", "xgboost_sub1"}
    for name, scores in a.intersection_scores.items():
        np.testing.assert_array_equal(scores[early_a], b.intersection_scores[name][early_b], err_msg=name)
    assert a.kept_members and [k for k in a.kept_members if k[0] < cut] == [
        k for k in b.kept_members if k[0] < cut
    ]
    summary = summarise(a, 3)
    assert {"subsets", "subsets_rank", "xgboost_avg", "subsets_avg", "xgboost_grow_avg"} <= summary.keys()
    assert summary["subsets_avg"].predictions > 0
    assert summary["xgboost_grow_avg"].predictions > 0


def test_the_expanding_window_reaches_back_to_the_first_instance_up_to_its_cap() -> None:
    assert expanding_window(10 * DAY, 25 * DAY, 30 * DAY) == 15 * DAY
    assert expanding_window(10 * DAY, 50 * DAY, 30 * DAY) == 30 * DAY
    assert expanding_window(10 * DAY, 5 * DAY, 30 * DAY) == 0.0


def test_the_growing_model_trains_on_everything_known_and_nothing_after_its_retrain() -> None:
    inst = _fleet()
    result = _backtest(inst, grow_max_days=24.0)
    first_ts = float(inst.ts.min())
    grow = result.grow_retrains
    # the retrain before the first scored period (R = 2) and one per retrain of the scored range
    assert [r.at_ts for r in grow] == [
        result.retrains[0].at_ts - 7 * DAY,
        *(r.at_ts for r in result.retrains),
    ]
    for r in grow:
        assert r.train_window_seconds == min(24 * DAY, r.at_ts - first_ts)
        assert r.max_train_ts < r.at_ts
        assert np.isnan(r.max_label_failure_ts) or r.max_label_failure_ts < r.at_ts
    sliding = {r.at_ts: r for r in result.retrains}
    for r in grow:
        if r.at_ts in sliding:
            # the sliding model's 14 days are inside the growing window: no fewer positives
            assert r.train_window_seconds >= sliding[r.at_ts].train_window_seconds
            assert r.positives >= sliding[r.at_ts].positives
    assert any(r.train_window_seconds == 24 * DAY for r in grow)  # the cap binds on the later retrains
    line = retrain_summary("xgboost_grow_avg retrains", grow)
    assert line.startswith(f"xgboost_grow_avg retrains: {len(grow)} retrains, windows ")
    assert retrain_summary("x", []) == "x: no retrains"


def test_the_kept_members_summary_counts_retrains() -> None:
    line = kept_summary([(0.0, ("xgboost", "xgboost_sub0")), (1.0, ("xgboost",))])
    assert line == "members kept by the validation slice, of 2 retrains: xgboost 2, xgboost_sub0 1"
