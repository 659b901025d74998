"""Ensembles: the parallel top-K intersection and the cascade's two stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from predictor.ensembles import CascadeEnsemble, keep_threshold, normalised_rank
from predictor.metrics import intersect, select_top_k
from predictor.models import LogisticModel


def test_intersection_is_a_subset_of_every_members_top_k() -> None:
    rng = np.random.default_rng(0)
    period = np.repeat(np.arange(5), 40)
    device = np.tile(np.array([f"d{i}" for i in range(40)], dtype=object), 5)
    selections = [select_top_k(period, device, rng.random(200), 10) for _ in range(3)]
    common = intersect(selections, period, device)
    keys = {(period[i], device[i]) for i in common}
    for sel in selections:
        assert keys <= {(period[i], device[i]) for i in sel}
    assert len(common) <= min(len(s) for s in selections)


def test_top_k_picks_each_device_once_per_period() -> None:
    period = np.array([0, 0, 0, 0])
    device = np.array(["a", "a", "b", "c"], dtype=object)
    chosen = select_top_k(period, device, np.array([0.9, 0.8, 0.5, 0.1]), 2)
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


def test_cascade_stage_two_is_trained_only_on_stage_one_survivors() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 3)).astype(np.float32)
    y = (x[:, 0] > 1.5).astype(np.float64)
    stage2 = _Recorder()
    cascade = CascadeEnsemble(LogisticModel(), stage2, keep_recall=0.95, min_keep_share=0.05)
    cascade.fit(x, y, seed=0)
    survivors = cascade.survivors(x)
    assert stage2.trained_on is not None
    assert 0 < len(stage2.trained_on) == survivors.sum() < len(x)
    np.testing.assert_array_equal(stage2.trained_on, x[survivors])


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


def test_a_periods_rank_average_does_not_depend_on_later_periods() -> None:
    from predictor.backtest import ranks_within_periods

    period = np.array([0, 0, 1, 1])
    first = ranks_within_periods(np.array([0.2, 0.9, 0.5, 0.1]), period)
    later_changed = ranks_within_periods(np.array([0.2, 0.9, 100.0, -100.0]), period)
    assert list(first[:2]) == list(later_changed[:2]) == [0.5, 1.0]
