"""Sliding ensembles for the backtest: XGBoost members on feature subsets, the members kept by their
strength on a validation slice before each retrain, and each step's ranks averaged over the last few
retrains.

Why these: on a fleet that does not drift within the training window (Backblaze 2013), a model retrained
every day re-draws its negative sample and sees a few more or fewer positives, so its picks jump from one
retrain to the next (BENCHMARKS.md measured this variance); a model trained once has none of that noise. Two
ways to average it away without looking at the scored days:
- members of comparable strength: XGBoost models that each leave out a different share of the columns and
  draw their own negatives (the study's parallel ensemble, with members close enough in strength that
  neither the rank average nor the intersection is dragged down by a weak one);
- the ranks a step gets from the last R retrains, averaged: a device's rank moves only when several
  retrains agree that it should.

Every function here is pure: the backtest (predictor.backtest) fits and scores; this module says which
columns a member sees, which members a retrain keeps and how ranks combine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from predictor.models import Model
from predictor.selection import ranks_within_steps

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

FULL_MEMBER = "xgboost"  # the sliding XGBoost on every column is always in the pool
# Backtest-only names (they need the retrains before them, which only the backtest walks):
SUBSETS = "subsets"  # the top-K intersection of the kept members
SUBSETS_RANK = "subsets_rank"  # the kept members' rank average
XGBOOST_AVG = "xgboost_avg"  # sliding XGBoost's ranks averaged over the last R retrains
SUBSETS_AVG = "subsets_avg"  # the kept members' ranks averaged over the last R retrains
# XGBoost on an expanding window (everything known, capped), its ranks averaged over the last R retrains
XGBOOST_GROW_AVG = "xgboost_grow_avg"
SLIDING_ENSEMBLES = (SUBSETS, SUBSETS_RANK, XGBOOST_AVG, SUBSETS_AVG, XGBOOST_GROW_AVG)
POOL_USERS = frozenset({SUBSETS, SUBSETS_RANK, SUBSETS_AVG})
# A retrain's scorer: the instance columns it reads and the fitted model.
Scorer = tuple[IntArray, Model]


def subset_member_name(i: int) -> str:
    return f"xgboost_sub{i}"


def feature_subsets(n_columns: int, members: int, seed: int) -> list[IntArray]:
    """For each member, the column positions it sees: the columns are dealt into `members` groups by a
    permutation fixed by `seed` (never by the data), and member i leaves out group i, so every member sees
    about (members - 1) / members of the columns and every column is seen by all but one member."""
    if members <= 0:
        return []
    if members == 1 or n_columns < members:
        return [np.arange(n_columns, dtype=np.int64) for _ in range(members)]
    order = np.random.default_rng(seed).permutation(n_columns)
    group = np.empty(n_columns, dtype=np.int64)
    group[order] = np.arange(n_columns) % members
    return [np.flatnonzero(group != i).astype(np.int64) for i in range(members)]


def comparable_members(validation_ap: Mapping[str, float | None], min_ratio: float) -> tuple[str, ...]:
    """The members whose validation PR-AUC is at least `min_ratio` of the best one's, in the given order.
    Every member when the slice could not rank any (no slice, or one without both classes): a retrain with
    nothing to judge by keeps the whole pool rather than guess."""
    known = {name: ap for name, ap in validation_ap.items() if ap is not None and np.isfinite(ap)}
    if not known:
        return tuple(validation_ap)
    best = max(known.values())
    return tuple(name for name, ap in known.items() if ap >= min_ratio * best)


def expanding_window(first_instance_ts: float, at: float, max_seconds: float) -> float:
    """The training window of a retrain at `at` that takes every instance from the first one of the data
    on, bounded by `max_seconds` (a drifting fleet's old behaviour must age out; the cost stays bounded).
    Zero when `at` is not past the first instance."""
    return max(0.0, min(max_seconds, at - first_instance_ts))


def mean_rank(member_scores: Sequence[FloatArray], ts: FloatArray) -> FloatArray:
    """The average over members of each instance's normalised rank within its own time step."""
    if not member_scores:
        return np.full(len(ts), np.nan)
    return np.asarray(np.mean([ranks_within_steps(s, ts) for s in member_scores], axis=0))


def stand_in_scores(
    pool: Sequence[str], kept: Sequence[str], member_scores: Mapping[str, FloatArray], consensus: FloatArray
) -> dict[str, FloatArray]:
    """Per pool member, what the top-K intersection uses for this retrain's batch: its own ranks when the
    retrain kept it, otherwise the kept members' rank average, so a member left out neither vetoes a device
    nor adds one to the intersection."""
    return {
        name: (member_scores[name] if name in kept and name in member_scores else consensus) for name in pool
    }


@dataclass
class RankHistory:
    """The scorers of the last `depth` retrains (bounded: older ones are dropped). A batch is ranked by
    each of them and the ranks averaged, newest and oldest alike: a retrain's model may rank later steps,
    it was fitted on data from before its own time, so using it later leaks nothing."""

    depth: int
    _retrains: deque[list[Scorer]] = field(default_factory=deque)

    def push(self, scorers: list[Scorer]) -> None:
        self._retrains.append(scorers)
        while len(self._retrains) > max(1, self.depth):
            self._retrains.popleft()

    def __len__(self) -> int:
        return len(self._retrains)

    def scorers(self) -> list[Scorer]:
        return [s for retrain in self._retrains for s in retrain]

    def average(self, x: npt.NDArray[np.float32], ts: FloatArray) -> FloatArray:
        """Each row's within-step rank by every kept scorer, averaged."""
        return mean_rank([model.score(x[:, cols]) for cols, model in self.scorers()], ts)


def kept_summary(kept: Sequence[tuple[float, tuple[str, ...]]]) -> str:
    """One line: how many of the pool's retrains kept each member."""
    counts: dict[str, int] = {}
    for _, names in kept:
        for n in names:
            counts[n] = counts.get(n, 0) + 1
    kept_by = ", ".join(f"{n} {c}" for n, c in sorted(counts.items()))
    return f"members kept by the validation slice, of {len(kept)} retrains: {kept_by}"
