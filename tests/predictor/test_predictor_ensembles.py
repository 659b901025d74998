"""Ensembles: the parallel top-K intersection and the cascade's two stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from predictor.ensembles import (
    CASCADE_FOLDS,
    CascadeEnsemble,
    keep_threshold,
    normalised_rank,
    out_of_fold_scores,
)
from predictor.models import LogisticModel
from predictor.selection import intersect_causal, ranks_within_steps, select_causal_k


def _top(period: np.ndarray, device: np.ndarray, score: np.ndarray, k: int) -> np.ndarray:
    ts = period.astype(np.float64)
    starts = np.arange(period.max() + 1, dtype=np.float64)
    return select_causal_k(period, ts, device, score, k, starts, 1.0, 1.0)


def test_intersection_is_a_subset_of_every_members_top_k() -> None:
    rng = np.random.default_rng(0)
    period = np.repeat(np.arange(5), 40)
    device = np.tile(np.array([f"d{i}" for i in range(40)], dtype=object), 5)
    selections = [_top(period, device, rng.random(200), 10) for _ in range(3)]
    common = intersect_causal(selections, period, period.astype(np.float64), device)
    keys = {(period[i], device[i]) for i in common}
    for sel in selections:
        assert keys <= {(period[i], device[i]) for i in sel}
    assert len(common) <= min(len(s) for s in selections)


def test_top_k_picks_each_device_once_per_period() -> None:
    period = np.array([0, 0, 0, 0])
    device = np.array(["a", "a", "b", "c"], dtype=object)
    chosen = _top(period, device, np.array([0.9, 0.8, 0.5, 0.1]), 2)
    assert chosen.tolist() == [0, 2]


class _Recorder:
    """A stage-2 model that remembers what it was trained on."""

    name = "recorder"

    def __init__(self) -> None:
        self.trained_on: np.ndarray | None = None

    def fit(self, x: np.ndarray, y: np.ndarray, seed: int) -> None:
        self.trained_on = x.copy()

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.full(len(x), 0.5)

    def save(self, directory: Path) -> dict[str, Any]:
        return {}


def test_cascade_stage_two_is_trained_only_on_out_of_fold_survivors() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 3)).astype(np.float32)
    y = (x[:, 0] + rng.normal(0, 0.5, 1000) > 1.5).astype(np.float64)
    stage2 = _Recorder()
    cascade = CascadeEnsemble(LogisticModel(), stage2, keep_recall=0.95, min_keep_share=0.05)
    cascade.fit(x, y, seed=0)
    oof = out_of_fold_scores(LogisticModel(), x, y, 0, CASCADE_FOLDS)
    passed = oof >= cascade.threshold
    assert stage2.trained_on is not None
    assert 0 < len(stage2.trained_on) == passed.sum() < len(x)
    np.testing.assert_array_equal(stage2.trained_on, x[passed])


def test_cascade_threshold_keeps_the_asked_recall_out_of_fold() -> None:
    # The threshold is set on scores of rows the scoring model never saw: it keeps 95% of those positives.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1500, 4)).astype(np.float32)
    y = (x[:, 0] + rng.normal(0, 1.0, 1500) > 2.0).astype(np.float64)
    cascade = CascadeEnsemble(LogisticModel(), LogisticModel(), keep_recall=0.95, min_keep_share=0.01)
    cascade.fit(x, y, seed=0)
    oof = out_of_fold_scores(LogisticModel(), x, y, 0, CASCADE_FOLDS)
    assert ((oof >= cascade.threshold) & (y == 1)).sum() / y.sum() >= 0.95


def test_cascade_ranks_every_survivor_above_every_dropped_instance() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(800, 3)).astype(np.float32)
    y = (x[:, 0] > 1.5).astype(np.float64)
    cascade = CascadeEnsemble(LogisticModel(), LogisticModel())
    cascade.fit(x, y, seed=0)
    s, kept = cascade.score(x), cascade.survivors(x)
    assert s[kept].min() >= 0.5 > s[~kept].max()


def test_keep_threshold_keeps_the_asked_share_of_positives() -> None:
    scores = np.linspace(0, 1, 101)
    y = (scores >= 0.5).astype(np.float64)
    thr = keep_threshold(scores, y, keep_recall=0.9, min_keep_share=0.01)
    assert ((scores >= thr) & (y == 1)).sum() / y.sum() >= 0.9


def test_normalised_rank_gives_ties_the_same_rank() -> None:
    r = normalised_rank(np.array([0.1, 0.5, 0.5, 0.9]))
    assert r[1] == r[2] and r[0] < r[1] < r[3] == 1.0


def test_a_steps_rank_average_does_not_depend_on_later_steps() -> None:
    ts = np.array([0.0, 0.0, 1.0, 1.0])
    first = ranks_within_steps(np.array([0.2, 0.9, 0.5, 0.1]), ts)
    later_changed = ranks_within_steps(np.array([0.2, 0.9, 100.0, -100.0]), ts)
    assert list(first[:2]) == list(later_changed[:2]) == [0.5, 1.0]
