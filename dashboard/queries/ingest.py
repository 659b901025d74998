"""Ingest health: how fresh each table is and how many rows arrived lately."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import TS, Cursor, as_int, fetch, tables

# The tables whose freshness says whether data is flowing.
WATCHED: Final = ("gpu_samples", "nic_samples", "events", "heartbeats", "predictions", "findings")


@dataclass(frozen=True, slots=True)
class TableIngest:
    table: str
    rows_in_window: int
    last_ts: float | None  # None: nothing in the window


def ingest(cur: Cursor, now: float, window: float = 300.0) -> list[TableIngest]:
    present = tables(cur)
    out = []
    for name in WATCHED:
        if name not in present:
            continue
        # `name` comes from the fixed tuple above, never from a request.
        rows = fetch(
            cur,
            f"SELECT count(*), epoch(max(ts)) FROM {name} WHERE ts >= {TS} AND ts <= {TS}",
            [now - window, now],
        )
        count, last = rows[0] if rows else (0, None)
        out.append(TableIngest(name, as_int(count), None if last is None else float(last)))
    return out
