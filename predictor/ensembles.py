"""The study's ensembles: parallel (members rank the devices; intersection of their top-K, or rank average)
and cascade (stage 1 keeps a high-recall share, stage 2 is trained only on what stage 1 keeps)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from predictor.members import PARALLEL_MEMBERS, load_single, make_single
from predictor.members import save as save_model
from predictor.models import Matrix, Model, Scores

DEFAULT_MEMBERS = PARALLEL_MEMBERS
# Stage 1's threshold comes from out-of-fold scores: a model scoring its own training rows is over-confident
# on the positives it memorised, so an in-sample threshold keeps far fewer real positives than it promises.
CASCADE_FOLDS = 3


def normalised_rank(scores: Scores) -> Scores:
    """Ranks scaled to (0, 1]; ties share their average rank."""
    if len(scores) == 0:
        return np.zeros(0)
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    # Average the ranks of tied scores so equal scores never get an arbitrary order.
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return np.asarray(sums[inverse] / counts[inverse] / len(scores))


class ParallelEnsemble:
    """Several models: `score` is their rank average; `member_scores` feed the top-K intersection."""

    name = "parallel"

    def __init__(self, members: Sequence[Model]) -> None:
        self.members = list(members)

    @classmethod
    def of(cls, names: Sequence[str] = DEFAULT_MEMBERS, n_jobs: int = 2) -> ParallelEnsemble:
        return cls([make_single(n, n_jobs) for n in names])

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None:
        for i, m in enumerate(self.members):
            m.fit(x, y, seed + i)

    def member_scores(self, x: Matrix) -> dict[str, Scores]:
        return {m.name: m.score(x) for m in self.members}

    def score(self, x: Matrix) -> Scores:
        ranks = [normalised_rank(s) for s in self.member_scores(x).values()]
        return np.asarray(np.mean(ranks, axis=0))

    def save(self, directory: Path) -> dict[str, Any]:
        return {
            "members": [
                save_model(m, directory / f"member{i}") | {"dir": f"member{i}"}
                for i, m in enumerate(self.members)
            ]
        }

    @classmethod
    def load(cls, directory: Path, meta: dict[str, Any]) -> ParallelEnsemble:
        return cls([load_single(directory / m["dir"], m) for m in meta["members"]])


class CascadeEnsemble:
    """Stage 1 drops the clearly healthy; stage 2, trained on stage 1's survivors only, ranks the rest.

    Survivors score in [0.5, 1], the dropped in [0, 0.5), so any survivor outranks any dropped instance.
    """

    name = "cascade"

    def __init__(
        self,
        stage1: Model,
        stage2: Model,
        keep_recall: float = 0.97,
        min_keep_share: float = 0.05,
    ) -> None:
        self.stage1 = stage1
        self.stage2 = stage2
        self.keep_recall = keep_recall
        self.min_keep_share = min_keep_share
        self.threshold = 0.0
        self.stage2_rows = 0  # instances stage 2 was trained on

    @classmethod
    def of(cls, stage1: str = "logistic", stage2: str = "xgboost", n_jobs: int = 2) -> CascadeEnsemble:
        return cls(make_single(stage1, n_jobs), make_single(stage2, n_jobs))

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None:
        s1 = out_of_fold_scores(self.stage1, x, y, seed, CASCADE_FOLDS)
        self.threshold = keep_threshold(s1, y, self.keep_recall, self.min_keep_share)
        self.stage1.fit(x, y, seed)
        # Stage 2 learns from what an unseen stage 1 would pass, as it will meet at scoring time.
        kept = s1 >= self.threshold
        if y[kept].sum() == 0 or y[kept].sum() == kept.sum():
            kept = np.ones(len(y), dtype=bool)
        self.stage2_rows = int(kept.sum())
        self.stage2.fit(x[kept], y[kept], seed + 1)

    def survivors(self, x: Matrix) -> npt.NDArray[np.bool_]:
        return np.asarray(self.stage1.score(x) >= self.threshold)

    def score(self, x: Matrix) -> Scores:
        s1 = self.stage1.score(x)
        kept = s1 >= self.threshold
        out = 0.5 * np.clip(s1 / max(self.threshold, 1e-12), 0.0, 1.0) * 0.999
        if kept.any():
            out[kept] = 0.5 + 0.5 * self.stage2.score(x[kept])
        return np.asarray(out)

    def save(self, directory: Path) -> dict[str, Any]:
        return {
            "stage1": save_model(self.stage1, directory / "stage1") | {"dir": "stage1"},
            "stage2": save_model(self.stage2, directory / "stage2") | {"dir": "stage2"},
            "threshold": self.threshold,
            "keep_recall": self.keep_recall,
            "min_keep_share": self.min_keep_share,
        }

    @classmethod
    def load(cls, directory: Path, meta: dict[str, Any]) -> CascadeEnsemble:
        model = cls(
            load_single(directory / "stage1", meta["stage1"]),
            load_single(directory / "stage2", meta["stage2"]),
            meta["keep_recall"],
            meta["min_keep_share"],
        )
        model.threshold = float(meta["threshold"])
        return model


def keep_threshold(
    scores: Scores, y: npt.NDArray[np.float64], keep_recall: float, min_keep_share: float
) -> float:
    """Highest threshold that keeps `keep_recall` of the positives and at least `min_keep_share` of all."""
    if len(scores) == 0:
        return 0.0
    pos = np.sort(scores[y > 0])
    by_recall = float(pos[int(np.floor((1.0 - keep_recall) * len(pos)))]) if len(pos) else float(scores.max())
    by_share = float(np.quantile(scores, 1.0 - min_keep_share))
    return min(by_recall, by_share)


def out_of_fold_scores(model: Model, x: Matrix, y: npt.NDArray[np.float64], seed: int, folds: int) -> Scores:
    """Each row scored by a copy of `model` fitted without it. The folds are contiguous blocks of rows (the
    instances come in time order), so a device's neighbouring instances mostly share a fold. A fold whose
    training part lacks a class falls back to the in-sample score of a model fitted on everything."""
    out = np.full(len(y), np.nan)
    bounds = np.linspace(0, len(y), folds + 1).astype(int)
    for lo, hi in itertools.pairwise(bounds):
        train = np.ones(len(y), dtype=bool)
        train[lo:hi] = False
        if hi <= lo or y[train].sum() == 0 or y[train].sum() == train.sum():
            continue
        fold = make_single(model.name)
        fold.fit(x[train], y[train], seed)
        out[lo:hi] = fold.score(x[lo:hi])
    missing = np.isnan(out)
    if missing.any():
        whole = make_single(model.name)
        whole.fit(x, y, seed)
        out[missing] = whole.score(x[missing])
    return out
