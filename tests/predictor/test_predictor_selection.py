"""Causal choice of predictions: every pick uses only the scores known at its instance time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictor.selection import select_at_volume, select_causal_k, volume_by_step

STEP = 1.0


def _oracle(
    period: np.ndarray, ts: np.ndarray, device: np.ndarray, score: np.ndarray, k: int, steps: int
) -> list[int]:
    """The rule written out plainly: walk time forward; at each time look only at the instances of that
    time; spend at most ceil(K * (j + 1) / n) of the period's budget by its step j; never pick a device
    twice in a period."""
    picks: list[int] = []
    for t in sorted(set(ts.tolist())):
        now = [i for i in range(len(ts)) if ts[i] == t]  # nothing later is looked at
        p = int(period[now[0]])
        j = int(t - p * steps)
        in_period = [i for i in picks if period[i] == p]
        allowed = math.ceil(k * (j + 1) / steps) - len(in_period)
        taken = {device[i] for i in in_period}
        for i in sorted(now, key=lambda i: (-score[i], str(device[i]))):
            if allowed <= 0:
                break
            if device[i] not in taken:
                picks.append(i)
                taken.add(device[i])
                allowed -= 1
    return sorted(picks)


def _grid(periods: int, steps: int, devices: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    ts = np.repeat(np.arange(periods * steps, dtype=np.float64), devices)
    device = np.tile(np.array([f"d{i:02d}" for i in range(devices)], dtype=object), periods * steps)
    period = (ts // steps).astype(np.int64)
    return period, ts, device, rng.random(len(ts))


@pytest.mark.parametrize(("steps", "k"), [(1, 3), (4, 3), (7, 10), (3, 1)])
def test_period_longer_than_step_matches_the_causal_oracle(steps: int, k: int) -> None:
    period, ts, device, score = _grid(5, steps, 12, seed=steps * 10 + k)
    starts = np.arange(5, dtype=np.float64) * steps
    chosen = select_causal_k(period, ts, device, score, k, starts, float(steps), STEP)
    assert chosen.tolist() == _oracle(period, ts, device, score, k, steps)
    assert all(np.bincount(period[chosen], minlength=5) <= k)


def test_changing_later_scores_never_changes_earlier_picks() -> None:
    period, ts, device, score = _grid(4, 5, 15, seed=1)
    starts = np.arange(4, dtype=np.float64) * 5
    before = select_causal_k(period, ts, device, score, 4, starts, 5.0, STEP)
    rng = np.random.default_rng(9)
    for cut in (2.0, 7.0, 13.0):
        later = score.copy()
        later[ts > cut] = rng.random(int((ts > cut).sum())) * 10  # the future, made very different
        after = select_causal_k(period, ts, device, later, 4, starts, 5.0, STEP)
        assert before[ts[before] <= cut].tolist() == after[ts[after] <= cut].tolist()


def test_a_better_score_later_in_the_period_cannot_claim_an_earlier_pick() -> None:
    # K = 1 per two-step period: at step 0 the budget allows one pick, and a is the best known then.
    # In hindsight b (0.99 at step 1) would win; a causal choice cannot know that at step 0.
    period = np.array([0, 0, 0, 0])
    ts = np.array([0.0, 0.0, 1.0, 1.0])
    device = np.array(["a", "b", "a", "b"], dtype=object)
    score = np.array([0.5, 0.4, 0.1, 0.99])
    chosen = select_causal_k(period, ts, device, score, 1, np.array([0.0]), 2.0, STEP)
    assert chosen.tolist() == [0]


def test_the_baseline_makes_as_many_picks_at_each_step_as_the_model() -> None:
    period, ts, device, score = _grid(3, 2, 10, seed=4)
    starts = np.arange(3, dtype=np.float64) * 2
    model = select_causal_k(period, ts, device, score, 3, starts, 2.0, STEP)
    other = np.random.default_rng(5).random(len(score))
    base = select_at_volume(period, ts, device, other, volume_by_step(period, ts, model))
    assert volume_by_step(period, ts, base) == volume_by_step(period, ts, model)


def test_nan_scores_rank_last() -> None:
    period = np.zeros(3, dtype=np.int64)
    ts = np.zeros(3)
    device = np.array(["a", "b", "c"], dtype=object)
    chosen = select_causal_k(period, ts, device, np.array([np.nan, 0.1, 0.2]), 2, np.array([0.0]), 1.0, 1.0)
    assert chosen.tolist() == [1, 2]
