"""Dataset builder: window features and horizon labels, computed in DuckDB SQL over the contract views.

Samples are first reduced to one row per device and time step (sums, extremes, first and last values), then
windows over the last W of steps combine those: one scan of the raw data, and window functions over a table
that is a step's worth of rows smaller. An instance at time t (the end of a step) sees only samples with
ts < t; its label is whether the device's next failure at or after t comes before t + H. Every step in the H
before a failure is a positive instance (the study's extra positives from sliding windows). An instance whose
future is not yet known (t + H past the end of the data, no failure seen) gets label NULL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt

from predictor.feature_choice import Categories, EventLog, category_feature_name, event_feature_name
from predictor.views import EVENTS_VIEW, FAILURES_VIEW, SAMPLES_VIEW, quote

INSTANCES_TABLE = "fg_instances"
# A device's failure within this long after its previous one is the same incident: a GPU that falls off the
# bus logs XID 79 and "fallen off the bus" seconds apart, and that is one failure to predict, not two.
INCIDENT_GAP_SECONDS = 3600.0
MAX_CANDIDATE_KINDS = 64
MAX_CANDIDATE_CATEGORIES = 32
# growth: the change since the device was first seen (a counter's rise over its whole known life, e.g.
# reallocated sectors or retired pages, which a window of W steps cuts short)
STATS = ("mean", "std", "min", "max", "last", "delta", "slope", "growth")
ID_COLUMNS = ("device_id", "ts", "label", "next_failure_ts")


@dataclass(frozen=True)
class DatasetSpec:
    """How instances are cut: feature window W, label horizon H, instance step, event kinds counted."""

    window_seconds: float = 3 * 86400.0
    horizon_seconds: float = 7 * 86400.0
    step_seconds: float = 86400.0
    event_kinds: tuple[str, ...] = ()  # kinds a trained model counts (chosen on its training window)
    max_event_kinds: int = 8  # how many kinds a training window keeps, the most frequent there

    @property
    def window_steps(self) -> int:
        return max(1, math.ceil(self.window_seconds / self.step_seconds - 1e-9))


@dataclass
class Instances:
    """Feature matrix and labels as numpy arrays (times in epoch seconds; label NaN = not yet known)."""

    device_id: npt.NDArray[np.object_]
    ts: npt.NDArray[np.float64]
    label: npt.NDArray[np.float64]
    next_failure_ts: npt.NDArray[np.float64]
    x: npt.NDArray[np.float32]
    feature_names: tuple[str, ...]
    meta: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    def subset(self, mask: npt.NDArray[np.bool_] | npt.NDArray[np.int64]) -> Instances:
        return Instances(
            self.device_id[mask],
            self.ts[mask],
            self.label[mask],
            self.next_failure_ts[mask],
            self.x[mask],
            self.feature_names,
            dict(self.meta),
        )


def incidents_sql() -> str:
    """The failures view with repeats of one incident folded into its first record (a subquery)."""
    return (
        f"(SELECT device_id, ts, kind FROM (SELECT *, lag(ts) OVER (PARTITION BY device_id ORDER BY ts) "
        f"AS prev_ts FROM {FAILURES_VIEW}) WHERE prev_ts IS NULL OR ts - prev_ts > {INCIDENT_GAP_SECONDS!r})"
    )


def _window_clause(window_steps: int) -> str:
    """The frame every feature uses: the current step and the W-1 before it, never a later one."""
    return f"PARTITION BY device_id ORDER BY b RANGE BETWEEN {window_steps - 1} PRECEDING AND CURRENT ROW"


def candidate_event_kinds(
    con: duckdb.DuckDBPyConnection, limit: int = MAX_CANDIDATE_KINDS
) -> tuple[str, ...]:
    """Every event kind, in order of first appearance, up to `limit`: whether a kind gets a column depends
    only on the kinds seen before it (never on counts over the whole history, the scored periods included).
    Each retrain then keeps the kinds frequent in its own training window (feature_choice.py)."""
    rows = con.execute(
        f"SELECT kind FROM {EVENTS_VIEW} GROUP BY kind ORDER BY min(ts), kind LIMIT ?", [limit]
    ).fetchall()
    return tuple(str(r[0]) for r in rows)


def fetch_events(con: duckdb.DuckDBPyConnection, kinds: tuple[str, ...]) -> EventLog:
    """The events of `kinds` as arrays, for counting kinds within each training window."""
    if not kinds:
        return EventLog.empty()
    arrays = con.execute(
        f"SELECT kind, ts FROM {EVENTS_VIEW} WHERE list_contains(?, kind) ORDER BY ts", [list(kinds)]
    ).fetchnumpy()
    return EventLog(np.asarray(arrays["kind"], dtype=object), _as_float(arrays["ts"]))


def candidate_categories(
    con: duckdb.DuckDBPyConnection, columns: tuple[str, ...], limit: int = MAX_CANDIDATE_CATEGORIES
) -> Categories:
    """Every value of each text column, in order of first appearance, up to `limit` per column (as for event
    kinds, whether a value gets a column depends only on the values seen before it)."""
    out = []
    for c in columns:
        rows = con.execute(
            f"SELECT CAST({quote(c)} AS VARCHAR) AS v FROM {SAMPLES_VIEW} WHERE {quote(c)} IS NOT NULL "
            "GROUP BY v ORDER BY min(ts), v LIMIT ?",
            [limit],
        ).fetchall()
        out.append((c, tuple(str(r[0]) for r in rows)))
    return tuple(out)


def feature_names(
    columns: tuple[str, ...], kinds: tuple[str, ...], categories: Categories = ()
) -> tuple[str, ...]:
    names = [f"{c}__{s}" for c in columns for s in STATS]
    names += [category_feature_name(c, v) for c, values in categories for v in values]
    names += [event_feature_name(k) for k in kinds]
    # No sample-count feature: live stores sample every few seconds, histories hourly or daily.
    names += ["failures__count", "hours_since_last_failure"]
    return tuple(names)


def build_instances_sql(
    columns: tuple[str, ...],
    kinds: tuple[str, ...],
    spec: DatasetSpec,
    where_samples: str = "true",
    categories: Categories = (),
) -> str:
    """The SELECT producing one row per (device, step end): id columns, label, then the features."""
    step = float(spec.step_seconds)
    horizon = float(spec.horizon_seconds)
    bucket_aggs = []
    for i, c in enumerate(columns):
        x = quote(c)
        bucket_aggs.append(
            f"count({x}) AS n{i}, sum({x}) AS s{i}, sum({x} * {x}) AS ss{i}, "
            f"min({x}) AS lo{i}, max({x}) AS hi{i}"
        )
    # One arg_min/arg_max over a struct of all columns costs a fraction of one per column; a NULL at a step's
    # first or last sample then leaves that step's first/last unset (the window skips it).
    packed = ", ".join(f"{quote(c)}" for c in columns)
    firsts = ", ".join(f"fi_.{quote(c)} AS fi{i}" for i, c in enumerate(columns))
    lasts = ", ".join(f"la_.{quote(c)} AS la{i}" for i, c in enumerate(columns))
    bucket_aggs.append(
        f"arg_min(struct_pack({packed}), ts) AS fi_, arg_max(struct_pack({packed}), ts) AS la_"
    )
    # A text column (model, SKU, driver) is its value at the step's last sample that has one; each value
    # of the encoding becomes a 0/1 column; a value outside the encoding (unseen in training) is all zeros.
    for i, (c, _values) in enumerate(categories):
        bucket_aggs.append(
            f"arg_max(CAST({quote(c)} AS VARCHAR), ts) FILTER (WHERE {quote(c)} IS NOT NULL) AS cat{i}"
        )
    event_aggs = [
        f"count(*) FILTER (WHERE kind = '{k.replace(chr(39), chr(39) * 2)}') AS e{j}"
        for j, k in enumerate(kinds)
    ]
    # Each distinct window aggregate once (`windows`), the features from them (`features`): DuckDB computes a
    # window expression as often as it is written, and mean, std, delta and growth share theirs.
    unbounded = "(PARTITION BY device_id ORDER BY b ROWS UNBOUNDED PRECEDING)"
    windows = []
    features = []
    for i, c in enumerate(columns):
        windows += [
            f"sum(n{i}) OVER w AS w_n{i}, sum(s{i}) OVER w AS w_s{i}, sum(ss{i}) OVER w AS w_ss{i}",
            f"min(lo{i}) OVER w AS w_lo{i}, max(hi{i}) OVER w AS w_hi{i}",
            f"last_value(la{i} IGNORE NULLS) OVER w AS w_la{i}",
            f"first_value(fi{i} IGNORE NULLS) OVER w AS w_fi{i}",
            f"regr_slope(s{i} / nullif(n{i}, 0), b) OVER w AS w_sl{i}",
            f"first_value(fi{i} IGNORE NULLS) OVER {unbounded} AS w_g{i}",
        ]
        mean = f"w_s{i} / nullif(w_n{i}, 0)"
        features += [
            f"{mean} AS {quote(c + '__mean')}",
            f"sqrt(greatest(w_ss{i} / nullif(w_n{i}, 0) - pow({mean}, 2), 0)) AS {quote(c + '__std')}",
            f"w_lo{i} AS {quote(c + '__min')}",
            f"w_hi{i} AS {quote(c + '__max')}",
            f"w_la{i} AS {quote(c + '__last')}",
            f"w_la{i} - w_fi{i} AS {quote(c + '__delta')}",
            f"w_sl{i} AS {quote(c + '__slope')}",
            f"w_la{i} - w_g{i} AS {quote(c + '__growth')}",
        ]
    for i, (c, values) in enumerate(categories):
        windows.append(f"last_value(cat{i} IGNORE NULLS) OVER w AS w_cat{i}")
        for v in values:
            literal = "'" + v.replace("'", "''") + "'"
            features.append(
                f"CAST(coalesce(w_cat{i} = {literal}, false) AS DOUBLE) "
                f"AS {quote(category_feature_name(c, v))}"
            )
    for j, k in enumerate(kinds):
        windows.append(f"coalesce(sum(e{j}) OVER w, 0) AS w_e{j}")
        features.append(f"w_e{j} AS {quote(event_feature_name(k))}")
    windows += [
        "coalesce(sum(nf) OVER w, 0) AS w_failures",
        f"coalesce((b + 1) * $step - max(last_fail) OVER {unbounded}, 1e9) / 3600.0 AS w_since_failure",
    ]
    features += ["w_failures AS failures__count", "w_since_failure AS hours_since_last_failure"]
    aggs = ", ".join(bucket_aggs)
    ev = "".join(", " + a for a in event_aggs)
    sql = f"""
WITH sb AS (
  SELECT device_id, CAST(floor(ts / $step) AS BIGINT) AS b, count(*) AS n_rows, {aggs}
  FROM {SAMPLES_VIEW} WHERE {where_samples} GROUP BY ALL
),
eb AS (
  SELECT device_id, CAST(floor(ts / $step) AS BIGINT) AS b, count(*) FILTER (WHERE is_failure) AS nf,
         max(ts) FILTER (WHERE is_failure) AS last_fail{ev}
  FROM (SELECT device_id, ts, kind, false AS is_failure FROM {EVENTS_VIEW}
        UNION ALL SELECT device_id, ts, kind, true FROM {incidents_sql()}) GROUP BY ALL
),
keys AS (SELECT device_id, b FROM sb UNION SELECT device_id, b FROM eb),
joined AS (
  SELECT *, {firsts}, {lasts} FROM keys LEFT JOIN sb USING (device_id, b) LEFT JOIN eb USING (device_id, b)
),
wins AS (
  SELECT device_id, b, n_rows, {", ".join(windows)}
  FROM joined WINDOW w AS ({_window_clause(spec.window_steps)})
),
feats AS (
  SELECT device_id, b, n_rows, CAST((b + 1) * $step AS DOUBLE) AS ts, {", ".join(features)} FROM wins
),
fail AS (SELECT device_id, ts AS fail_ts FROM {incidents_sql()}),
data_end AS (
  SELECT greatest((SELECT max(ts) FROM {SAMPLES_VIEW} WHERE {where_samples}),
                  coalesce((SELECT max(ts) FROM {FAILURES_VIEW}), 0)) AS t
)
SELECT feats.device_id, feats.ts,
  CASE WHEN fail.fail_ts < feats.ts + $horizon THEN 1.0
       WHEN fail.fail_ts IS NOT NULL OR feats.ts + $horizon <= (SELECT t FROM data_end) THEN 0.0
       ELSE NULL END AS label,
  fail.fail_ts AS next_failure_ts,
  {", ".join(quote(f) for f in feature_names(columns, kinds, categories))}
FROM feats ASOF LEFT JOIN fail ON feats.device_id = fail.device_id AND fail.fail_ts >= feats.ts
WHERE feats.n_rows IS NOT NULL
"""
    return sql.replace("$step", repr(step)).replace("$horizon", repr(horizon))


def build_instances(
    con: duckdb.DuckDBPyConnection,
    columns: tuple[str, ...],
    spec: DatasetSpec,
    kinds: tuple[str, ...] | None = None,
    table: str = INSTANCES_TABLE,
    categories: Categories = (),
) -> tuple[str, ...]:
    """Materialise the instances table from the contract views; returns the feature names."""
    kinds = candidate_event_kinds(con) if kinds is None else kinds
    sql = build_instances_sql(columns, kinds, spec, categories=categories)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {sql}")
    return feature_names(columns, kinds, categories)


def fetch_instances(
    con: duckdb.DuckDBPyConnection, names: tuple[str, ...], table: str = INSTANCES_TABLE, where: str = "true"
) -> Instances:
    """Read instances into numpy, ordered by time then device (deterministic)."""
    cols = ", ".join(quote(n) for n in names)
    rel = con.execute(
        f"SELECT device_id, ts, label, next_failure_ts{', ' if names else ''}{cols} FROM {table} "
        f"WHERE {where} ORDER BY ts, device_id"
    )
    arrays = rel.fetchnumpy()
    x = np.empty((len(arrays["ts"]), len(names)), dtype=np.float32)
    for j, n in enumerate(names):
        x[:, j] = _as_float(arrays[n])
    return Instances(
        device_id=np.asarray(arrays["device_id"], dtype=object),
        ts=_as_float(arrays["ts"]).astype(np.float64),
        label=_as_float(arrays["label"]).astype(np.float64),
        next_failure_ts=_as_float(arrays["next_failure_ts"]).astype(np.float64),
        x=x,
        feature_names=names,
    )


def _as_float(values: object) -> npt.NDArray[np.float64]:
    """Masked arrays (NULLs) become NaN."""
    if isinstance(values, np.ma.MaskedArray):
        masked: Any = values
        filled: Any = masked.astype(np.float64).filled(np.nan)
        return np.asarray(filled, dtype=np.float64)
    return np.asarray(values, dtype=np.float64)


def data_end_ts(con: duckdb.DuckDBPyConnection) -> float:
    """The time up to which the history is known: the last sample or failure."""
    row = con.execute(
        f"SELECT greatest((SELECT max(ts) FROM {SAMPLES_VIEW}), "
        f"coalesce((SELECT max(ts) FROM {FAILURES_VIEW}), 0))"
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def fetch_failures(con: duckdb.DuckDBPyConnection) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.float64]]:
    arrays = con.execute(f"SELECT device_id, ts FROM {incidents_sql()} ORDER BY ts, device_id").fetchnumpy()
    return np.asarray(arrays["device_id"], dtype=object), _as_float(arrays["ts"])
