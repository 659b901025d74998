"""The predictor's dataset built on Dask workers, one share of the devices each (docs/scale-out.md).

Every feature of an instance is computed from its own device's history (windows PARTITION BY device_id),
so devices can be split between workers with no exchange: worker i of n opens the same Parquet inputs in its
own DuckDB and keeps the devices with hash(device_id) % n = i. That is correct whatever the file layout
(a device's rows may lie in many files, as with dt= partitions); each worker scans the files but holds only
its share in memory. What must be the same everywhere (the feature columns, the candidate event kinds and
categories, the data's end) is decided once on the client and passed in.

These functions run on the workers: plain arguments in, numpy arrays out (Dask pickles them between its own
processes; nothing read from the network is unpickled here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import numpy.typing as npt

from fleetguard.predict.contract import register_inputs
from predictor.dataset import DatasetSpec, Instances, build_instances, fetch_instances
from predictor.feature_choice import Categories, category_feature_name
from predictor.sliding import labels_known_at
from predictor.views import SAMPLES_VIEW


@dataclass(frozen=True)
class SourceFiles:
    samples: str
    failures: str | None
    events: str | None


@dataclass(frozen=True)
class ShareSpec:
    """What every worker builds the same way."""

    columns: tuple[str, ...]
    spec: DatasetSpec
    kinds: tuple[str, ...]
    categories: Categories


@dataclass(frozen=True)
class TrainingShare:
    """A worker's training rows (labels known at the end of the data, inside the training window)."""

    x: npt.NDArray[np.float32]
    y: npt.NDArray[np.float64]
    ts: npt.NDArray[np.float64]
    feature_names: tuple[str, ...]

    @property
    def negatives(self) -> int:
        return int(len(self.y) - self.y.sum())


def open_share(source: SourceFiles, share: int, shares: int) -> duckdb.DuckDBPyConnection:
    """The contract views over the inputs, the samples narrowed to this share of the devices."""
    con = duckdb.connect()
    con.execute("SET threads = 1")  # a worker is one core of the cluster
    register_inputs(
        con,
        Path(source.samples),
        Path(source.failures) if source.failures else None,
        Path(source.events) if source.events else None,
    )
    con.execute(f"ALTER VIEW {SAMPLES_VIEW} RENAME TO {SAMPLES_VIEW}_all")
    con.execute(
        f"CREATE TEMP VIEW {SAMPLES_VIEW} AS SELECT * FROM {SAMPLES_VIEW}_all "
        f"WHERE hash(device_id) % {int(shares)} = {int(share)}"
    )
    return con


def build_share(source: SourceFiles, share: int, shares: int, spec: ShareSpec) -> Instances:
    con = open_share(source, share, shares)
    try:
        names = build_instances(con, spec.columns, spec.spec, spec.kinds, categories=spec.categories)
        return fetch_instances(con, names)
    finally:
        con.close()


def training_share(
    inst: Instances, at: float, window_seconds: float, horizon_seconds: float
) -> TrainingShare:
    """The rows single-process training takes from these instances (sliding.training_indices, before its
    sampling of negatives)."""
    known = labels_known_at(inst, at, horizon_seconds)
    keep = np.flatnonzero((inst.ts >= at - window_seconds) & (inst.ts < at) & ~np.isnan(known))
    return TrainingShare(inst.x[keep], known[keep], inst.ts[keep], inst.feature_names)


def sample_negatives(rows: TrainingShare, keep_negatives: int, seed: int, share: int) -> TrainingShare:
    """At most `keep_negatives` of the negatives (all positives kept), drawn reproducibly per share."""
    neg = np.flatnonzero(rows.y == 0)
    if len(neg) <= keep_negatives:
        return rows
    rng = np.random.default_rng([seed, share])
    chosen = np.sort(
        np.concatenate([np.flatnonzero(rows.y == 1), rng.choice(neg, keep_negatives, replace=False)])
    )
    return TrainingShare(rows.x[chosen], rows.y[chosen], rows.ts[chosen], rows.feature_names)


def category_sums(rows: TrainingShare, categories: Categories) -> npt.NDArray[np.float64]:
    """Per candidate category column, how many of these rows hold it (summed over shares on the client)."""
    index = {n: i for i, n in enumerate(rows.feature_names)}
    cols = [index[category_feature_name(c, v)] for c, values in categories for v in values]
    if not cols or len(rows.y) == 0:
        return np.zeros(len(cols), dtype=np.float64)
    return np.asarray(np.nansum(rows.x[:, cols], axis=0), dtype=np.float64)


def select_columns(rows: TrainingShare, cols: npt.NDArray[np.int64]) -> TrainingShare:
    return TrainingShare(
        np.ascontiguousarray(rows.x[:, cols]), rows.y, rows.ts, tuple(rows.feature_names[i] for i in cols)
    )


def share_x(rows: TrainingShare) -> npt.NDArray[np.float32]:
    return rows.x


def share_y(rows: TrainingShare) -> npt.NDArray[np.float64]:
    return rows.y


def share_shape(rows: TrainingShare) -> tuple[int, int, int, float, float]:
    """(rows, positives, negatives, first ts, last ts)."""
    if len(rows.y) == 0:
        return 0, 0, 0, np.inf, -np.inf
    return len(rows.y), int(rows.y.sum()), rows.negatives, float(rows.ts.min()), float(rows.ts.max())


def first_ts(inst: Instances) -> float:
    return float(inst.ts.min()) if len(inst) else np.inf
