"""Each GPU's first sample ever, for live scoring's `__growth` features, kept between scoring rounds.

A `__growth` feature is the rise of a column since the GPU was first seen; training computes it over the whole
history. Live scoring reads only the feature window's samples, so without the first sample a GPU's ECC count
that rose for weeks would look flat. Finding that sample is a scan of the history before the window, which the
controller cannot afford every scoring round (a minute) on a fleet store: a GPU's first sample never changes,
so it is looked up once and kept here, and a GPU with none before the window yet is looked for again only in
the history added since the last look.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb

from predictor.views import quote

FIRST_SAMPLES_TABLE = "fg_first_samples"
# More GPUs than any fleet this controller serves (its store is bounded the same way); past it the cache
# starts again rather than grow.
MAX_GPUS = 1_000_000


@dataclass
class FirstSamples:
    """The first samples found so far (per GPU: its time and the values of `columns`), and how far back the
    history has been searched for the GPUs with none found yet."""

    columns: tuple[str, ...] = ()
    found: dict[str, tuple[float, tuple[float | None, ...]]] = field(default_factory=dict)
    searched_until: dict[str, float] = field(default_factory=dict)  # none before this time

    def register(
        self,
        con: duckdb.DuckDBPyConnection,
        prefix: str,
        columns: tuple[str, ...],
        in_window: str,
        since: float,
    ) -> str:
        """Look up what is missing for the GPUs of the window, then write the temp table of their first
        samples older than `since` into `con`; returns its name."""
        if columns != self.columns or len(self.found) + len(self.searched_until) > MAX_GPUS:
            self.columns, self.found, self.searched_until = columns, {}, {}
        query = f"SELECT DISTINCT uuid FROM {prefix}gpu_samples WHERE {in_window}"
        window = [str(r[0]) for r in con.execute(query).fetchall()]
        for u in window:
            if self.searched_until.get(u, -math.inf) > since:  # a clock set back: look for it afresh
                del self.searched_until[u]
        unknown = [u for u in window if u not in self.found and u not in self.searched_until]
        pending = [u for u in window if u in self.searched_until]
        self._look_up(con, prefix, unknown, pending, since)
        rows = [(u, *self.found[u]) for u in window if u in self.found and self.found[u][0] < since]
        values = [[r[2][i] for r in rows] for i in range(len(columns))]
        cols = "".join(f", unnest(?::DOUBLE[]) AS {quote(c)}" for c in columns)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {FIRST_SAMPLES_TABLE} AS "
            f"SELECT unnest(?::VARCHAR[]) AS device_id, unnest(?::DOUBLE[]) AS ts{cols}",
            [[r[0] for r in rows], [r[1] for r in rows], *values],
        )
        return FIRST_SAMPLES_TABLE

    def _look_up(
        self,
        con: duckdb.DuckDBPyConnection,
        prefix: str,
        unknown: list[str],
        pending: list[str],
        since: float,
    ) -> None:
        if not unknown and not pending:
            return
        names = ", ".join(quote(c) for c in self.columns)
        packed = f"arg_min(struct_pack({names}), ts)" if self.columns else "NULL"
        unpacked = "".join(f", CAST(first.{quote(c)} AS DOUBLE)" for c in self.columns)
        # One scan: a GPU never looked for reads the whole history before `since`, one looked for before only
        # what came after that look (the earliest such look bounds the scan, so the store's zone maps on ts
        # skip the rest).
        which = "uuid IN (SELECT unnest(?::VARCHAR[]))"
        params: list[object] = [_naive_utc(since), unknown]
        if pending:
            after = min(self.searched_until[u] for u in pending)
            which = f"({which} OR (uuid IN (SELECT unnest(?::VARCHAR[])) AND ts >= ?::TIMESTAMP))"
            params += [pending, _naive_utc(after)]
        rows = con.execute(
            f"SELECT device_id, epoch(t0){unpacked} FROM (SELECT uuid AS device_id, min(ts) AS t0, "
            f"{packed} AS first FROM {prefix}gpu_samples WHERE ts < ?::TIMESTAMP AND {which} GROUP BY uuid)",
            params,
        ).fetchall()
        for device, t0, *first in rows:
            self.found[str(device)] = (float(t0), tuple(None if v is None else float(v) for v in first))
            self.searched_until.pop(str(device), None)
        for u in (*unknown, *pending):
            if u not in self.found:
                self.searched_until[u] = since


def _naive_utc(epoch_seconds: float) -> datetime:
    """The store keeps naive UTC timestamps: a parameter compared with them must be one."""
    return datetime.fromtimestamp(float(epoch_seconds), UTC).replace(tzinfo=None)
