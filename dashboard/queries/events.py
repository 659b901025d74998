"""Fault events (XID, SXID, GPU lost, link down, NCCL errors): counts per GPU and the recent list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import TS, Cursor, as_int, fetch

MAX_EVENTS: Final = 500


@dataclass(frozen=True, slots=True)
class EventCount:
    """Events of one kind (and code) on one host's GPU (gpu_index None: not about a GPU) in a window."""

    host: str
    gpu_index: int | None
    pci_bus_id: str | None  # kernel-log XIDs name the GPU by its PCI address only
    kind: str
    code: int | None
    count: int  # repeats folded into one row count too
    last_ts: float


_COUNTS_SQL: Final = f"""
SELECT host, gpu_index, pci_bus_id, kind, code, sum(count), epoch(max(coalesce(last_ts, ts)))
FROM events
WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
GROUP BY host, gpu_index, pci_bus_id, kind, code
"""


def event_counts(cur: Cursor, since: float, until: float, host: str | None = None) -> list[EventCount]:
    rows = fetch(cur, _COUNTS_SQL, [since, until, host, host])
    return [
        EventCount(
            str(r[0]), None if r[1] is None else int(r[1]), r[2], str(r[3]), r[4], as_int(r[5]), float(r[6])
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class EventRow:
    ts: float
    host: str
    kind: str
    code: int | None
    gpu_index: int | None
    device: str | None
    count: int
    source: str
    message: str


_LIST_SQL: Final = f"""
SELECT epoch(ts), host, kind, code, gpu_index, device, count, source, message
FROM events
WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?) AND (? IS NULL OR gpu_index = ?)
ORDER BY ts DESC LIMIT {MAX_EVENTS}
"""


def recent_events(
    cur: Cursor, since: float, until: float, host: str | None = None, gpu_index: int | None = None
) -> list[EventRow]:
    """The newest events first, at most MAX_EVENTS."""
    rows = fetch(cur, _LIST_SQL, [since, until, host, host, gpu_index, gpu_index])
    return [
        EventRow(float(r[0]), str(r[1]), str(r[2]), r[3], r[4], r[5], as_int(r[6]), str(r[7]), str(r[8]))
        for r in rows
    ]
