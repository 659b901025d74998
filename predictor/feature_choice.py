"""Which feature columns a model retrained at time `at` may use, chosen from its training window alone.

The instances carry a count column for every event kind seen (up to a cap, in order of first appearance, so
whether a kind has a column depends only on what came before it). Each retrain keeps the kinds most frequent
in its own training window; kinds that only become common later cannot steer an earlier model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

EVENT_PREFIX = "events_"
EVENT_SUFFIX = "__count"
# (text column, its values that have a 0/1 feature column), per column
Categories = tuple[tuple[str, tuple[str, ...]], ...]


def category_feature_name(column: str, value: str) -> str:
    return f"{column}=={value}"


def event_feature_name(kind: str) -> str:
    safe = re.sub(r"[^0-9A-Za-z_]+", "_", kind).strip("_") or "x"
    return f"{EVENT_PREFIX}{safe}{EVENT_SUFFIX}"


@dataclass(frozen=True)
class EventLog:
    """Non-failure events as arrays (kind, time in epoch seconds), for counting within a window."""

    kind: npt.NDArray[np.object_]
    ts: npt.NDArray[np.float64]

    @classmethod
    def empty(cls) -> EventLog:
        return cls(np.zeros(0, dtype=object), np.zeros(0, dtype=np.float64))


def kinds_in_window(events: EventLog, start: float, end: float, limit: int) -> tuple[str, ...]:
    """The `limit` kinds most frequent in [start, end) (ties by name); kinds absent there are not kept."""
    inside = (events.ts >= start) & (events.ts < end)
    if not inside.any() or limit <= 0:
        return ()
    kinds, counts = np.unique(events.kind[inside].astype(str), return_counts=True)
    order = sorted(range(len(kinds)), key=lambda i: (-int(counts[i]), str(kinds[i])))
    return tuple(str(kinds[i]) for i in order[:limit])


def columns_for(
    feature_names: tuple[str, ...],
    candidate_kinds: tuple[str, ...],
    kept_kinds: tuple[str, ...],
    dropped_categories: frozenset[str] = frozenset(),
) -> npt.NDArray[np.int64]:
    """Indices of every column except the event columns of kinds not kept and the category columns
    dropped, in feature order."""
    dropped = {event_feature_name(k) for k in candidate_kinds} - {event_feature_name(k) for k in kept_kinds}
    dropped |= dropped_categories
    return np.asarray([i for i, n in enumerate(feature_names) if n not in dropped], dtype=np.int64)


def categories_in_rows(
    feature_names: tuple[str, ...], candidates: Categories, x_rows: npt.NDArray[np.float32], limit: int
) -> Categories:
    """Per text column, the `limit` values most frequent among these (training) rows, in candidate order;
    a value absent from them gets no column, so a model never splits on a category it never saw."""
    index = {n: i for i, n in enumerate(feature_names)}
    out = []
    for column, values in candidates:
        counts = {v: float(np.nansum(x_rows[:, index[category_feature_name(column, v)]])) for v in values}
        top = sorted((v for v in values if counts[v] > 0), key=lambda v: -counts[v])[:limit]
        out.append((column, tuple(v for v in values if v in top)))
    return tuple(out)


def dropped_categories(candidates: Categories, kept: Categories) -> frozenset[str]:
    keep = {category_feature_name(c, v) for c, values in kept for v in values}
    return frozenset(category_feature_name(c, v) for c, values in candidates for v in values) - keep
