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
    feature_names: tuple[str, ...], candidate_kinds: tuple[str, ...], kept_kinds: tuple[str, ...]
) -> npt.NDArray[np.int64]:
    """Indices of every non-event column plus the event columns of `kept_kinds`, in feature order."""
    dropped = {event_feature_name(k) for k in candidate_kinds} - {event_feature_name(k) for k in kept_kinds}
    return np.asarray([i for i, n in enumerate(feature_names) if n not in dropped], dtype=np.int64)
