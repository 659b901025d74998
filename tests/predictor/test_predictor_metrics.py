"""Metrics on hand-made backtests: precision@K, recall, lead time, equal-volume baseline."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.metrics import Scored, evaluate, precision_of
from predictor.selection import select_at_volume, select_causal_k, volume_by_step

H = 3600.0
DAY = 86400.0


def select_top_k(s: Scored, score: np.ndarray, k: int) -> np.ndarray:
    return select_causal_k(s.period, s.ts, s.device_id, score, k, s.period_starts, s.period_seconds, DAY)


def _scored() -> Scored:
    # Two daily periods, three devices; device a fails at 1.5d (caught from day 0 and day 1), c at 1.9d.
    nan = np.nan
    return Scored(
        period=np.array([0, 0, 0, 1, 1, 1]),
        device_id=np.array(["a", "b", "c", "a", "b", "c"], dtype=object),
        ts=np.array([0.0, 0.0, 0.0, DAY, DAY, DAY]),
        label=np.array([1.0, 0.0, 0.0, 1.0, 0.0, 1.0]),
        next_failure_ts=np.array([1.5 * DAY, nan, 1.9 * DAY, 1.5 * DAY, nan, 1.9 * DAY]),
        period_starts=np.array([0.0, DAY]),
        period_seconds=DAY,
        failures_device=np.array(["a", "c"], dtype=object),
        failures_ts=np.array([1.5 * DAY, 1.9 * DAY]),
    )


def test_precision_recall_and_lead_time_of_a_top_1_model() -> None:
    s = _scored()
    score = np.array([0.9, 0.1, 0.2, 0.3, 0.8, 0.4])  # day 0 picks a (hit), day 1 picks b (miss)
    chosen = select_top_k(s, score, 1)
    m = evaluate(s, chosen, score, DAY)
    assert (m.predictions, m.hits, m.precision_at_k) == (2, 1, 0.5)
    assert m.recall == 0.5  # a caught, c missed
    assert m.median_lead_time_hours == pytest.approx(36.0)
    assert m.precision_std == pytest.approx(0.5)


def test_lead_time_counts_from_the_earliest_catching_prediction() -> None:
    s = _scored()
    score = np.array([0.9, 0.1, 0.2, 0.9, 0.1, 0.8])
    m = evaluate(s, select_top_k(s, score, 2), score, DAY)
    assert m.recall == 1.0
    # a is caught from day 0 (36 h ahead); c's day-0 pick is outside its horizon; day 1 is 21.6 h ahead.
    assert m.median_lead_time_hours == pytest.approx((36.0 + 0.9 * 24) / 2)


def test_pr_auc_is_perfect_when_scores_order_labels() -> None:
    s = _scored()
    m = evaluate(s, np.array([0]), s.label.copy(), DAY)
    assert m.pr_auc == 1.0


def test_baseline_precision_is_taken_at_the_other_models_volume_per_step() -> None:
    s = _scored()
    only_day1 = np.array([4])  # the other model predicted once, at day 1
    volume = volume_by_step(s.period, s.ts, only_day1)
    assert volume == {(1, DAY): 1}
    baseline = np.array([0.9, 0.1, 0.2, 0.1, 0.2, 0.9])  # its top-1 at day 1 is c: a hit
    chosen = select_at_volume(s.period, s.ts, s.device_id, baseline, volume)
    assert chosen.tolist() == [5] and precision_of(s, chosen) == 1.0
