"""A random forest as flat arrays scored by a vectorised traversal: saved without pickle, loaded as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class ForestArrays:
    """All trees' nodes concatenated; `roots[i]` is tree i's first node. Leaves have feature == -1."""

    left: npt.NDArray[np.int64]
    right: npt.NDArray[np.int64]
    feature: npt.NDArray[np.int64]
    threshold: npt.NDArray[np.float64]
    positive: npt.NDArray[np.float64]  # share of positive weight at the node
    roots: npt.NDArray[np.int64]
    depth: int

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {
            "rf_left": self.left,
            "rf_right": self.right,
            "rf_feature": self.feature,
            "rf_threshold": self.threshold,
            "rf_positive": self.positive,
            "rf_roots": self.roots,
            "rf_depth": np.array([self.depth]),
        }

    @classmethod
    def from_arrays(cls, a: Any) -> ForestArrays:
        return cls(
            a["rf_left"],
            a["rf_right"],
            a["rf_feature"],
            a["rf_threshold"],
            a["rf_positive"],
            a["rf_roots"],
            int(a["rf_depth"][0]),
        )


def from_sklearn(forest: Any) -> ForestArrays:
    """Export a fitted sklearn RandomForestClassifier (binary) from its trees' `tree_` arrays."""
    lefts, rights, feats, thrs, pos, roots = [], [], [], [], [], []
    offset = 0
    depth = 0
    pos_class = list(forest.classes_).index(1.0) if 1.0 in list(forest.classes_) else None
    for est in forest.estimators_:
        t = est.tree_
        n = t.node_count
        value = t.value[:, 0, :]
        total = value.sum(axis=1)
        share = (
            value[:, pos_class] / np.where(total > 0, total, 1.0) if pos_class is not None else np.zeros(n)
        )
        leaf = t.children_left < 0
        lefts.append(np.where(leaf, np.arange(n), t.children_left) + offset)
        rights.append(np.where(leaf, np.arange(n), t.children_right) + offset)
        feats.append(np.where(leaf, -1, t.feature))
        thrs.append(t.threshold)
        pos.append(share)
        roots.append(offset)
        offset += n
        depth = max(depth, int(t.max_depth))
    return ForestArrays(
        np.concatenate(lefts).astype(np.int64),
        np.concatenate(rights).astype(np.int64),
        np.concatenate(feats).astype(np.int64),
        np.concatenate(thrs).astype(np.float64),
        np.concatenate(pos).astype(np.float64),
        np.asarray(roots, dtype=np.int64),
        depth,
    )


def predict_positive(
    forest: ForestArrays, x: npt.NDArray[np.float64], chunk_rows: int = 20_000
) -> npt.NDArray[np.float64]:
    """Mean over trees of the leaf's positive share; leaves point to themselves, so `depth` steps suffice."""
    out = np.empty(len(x), dtype=np.float64)
    for lo in range(0, len(x), chunk_rows):
        # sklearn compares float32 features with float64 thresholds; do the same.
        xs = np.asarray(x[lo : lo + chunk_rows], dtype=np.float32)
        rows = np.arange(len(xs))[:, None]
        node = np.broadcast_to(forest.roots, (len(xs), len(forest.roots))).copy()
        for _ in range(forest.depth):
            f = forest.feature[node]
            go_left = xs[rows, np.maximum(f, 0)] <= forest.threshold[node]
            node = np.where(go_left, forest.left[node], forest.right[node])
        out[lo : lo + chunk_rows] = forest.positive[node].mean(axis=1)
    return out
