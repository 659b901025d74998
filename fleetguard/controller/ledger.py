"""The ingest ledger: which (host, boot_id, seq) batches are committed, so a re-sent batch is stored once.

In memory: per (host, boot_id), the committed sequence numbers as sorted, disjoint, inclusive ranges (an
agent sends in order, so this is one range per incarnation, plus a few while it catches up newest-first).
In the store: `ingest_ledger`, one row per committed batch written in the same transaction as its rows, and
merged into ranges by `compact_sql` now and then; `load` rebuilds the memory from it at start.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

import duckdb

Key = tuple[str, str]  # (host, boot_id)

# Bounds, per host, so one host (a crash-looping agent, or a compromised one inventing a boot id per batch or
# skipping every other seq) cannot grow the ledger without end. Forgetting only costs that host: a batch of a
# forgotten incarnation re-sent after a lost reply would be stored twice.
MAX_BOOTS_PER_HOST = 64  # the incarnations most recently committed
MAX_RANGES_PER_BOOT = 1024  # the highest ranges (a real agent has one, a few while it catches up)


class Ledger:
    def __init__(self) -> None:
        self._ranges: dict[Key, list[list[int]]] = {}
        self._boots: dict[str, OrderedDict[str, None]] = {}  # per host, least recently committed first

    def __contains__(self, batch: tuple[str, str, int]) -> bool:
        host, boot_id, seq = batch
        ranges = self._ranges.get((host, boot_id))
        if not ranges:
            return False
        i = bisect.bisect_right(ranges, [seq, 2**63]) - 1
        return i >= 0 and ranges[i][0] <= seq <= ranges[i][1]

    def add(self, host: str, boot_id: str, seq_lo: int, seq_hi: int | None = None) -> None:
        """Mark seq_lo..seq_hi committed, merging with neighbouring ranges."""
        hi = seq_lo if seq_hi is None else seq_hi
        boots = self._boots.setdefault(host, OrderedDict())
        boots[boot_id] = None
        boots.move_to_end(boot_id)
        while len(boots) > MAX_BOOTS_PER_HOST:
            oldest, _ = boots.popitem(last=False)
            self._ranges.pop((host, oldest), None)
        ranges = self._ranges.setdefault((host, boot_id), [])
        i = bisect.bisect_left(ranges, [seq_lo, seq_lo])
        ranges.insert(i, [seq_lo, hi])
        # merge with the previous and following ranges where they touch or overlap
        start = max(i - 1, 0)
        merged: list[list[int]] = []
        for r in ranges[start : i + 2]:
            if merged and r[0] <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], r[1])
            else:
                merged.append(list(r))
        ranges[start : i + 2] = merged
        if len(ranges) > MAX_RANGES_PER_BOOT:
            del ranges[: len(ranges) - MAX_RANGES_PER_BOOT]

    def ranges(self, host: str, boot_id: str) -> list[tuple[int, int]]:
        return [(lo, hi) for lo, hi in self._ranges.get((host, boot_id), [])]

    def __len__(self) -> int:
        return sum(len(r) for r in self._ranges.values())

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> Ledger:
        ledger = cls()
        for host, boot_id, lo, hi in con.execute(
            "SELECT host, boot_id, seq_lo, seq_hi FROM ingest_ledger "
            "ORDER BY committed_ts, host, boot_id, seq_lo"
        ).fetchall():
            ledger.add(str(host), str(boot_id), int(lo), int(hi))
        return ledger


# Gaps and islands: rows whose ranges touch are one island; each island becomes one row.
_ISLANDS = """
WITH ordered AS (
  SELECT *, max(seq_hi) OVER (PARTITION BY host, boot_id ORDER BY seq_lo, seq_hi
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_hi
  FROM ingest_ledger
), grouped AS (
  SELECT *, sum(CASE WHEN prev_hi IS NULL OR seq_lo > prev_hi + 1 THEN 1 ELSE 0 END)
              OVER (PARTITION BY host, boot_id ORDER BY seq_lo, seq_hi) AS island
  FROM ordered
)
SELECT host, boot_id, min(seq_lo) AS seq_lo, max(seq_hi) AS seq_hi, max(committed_ts) AS committed_ts,
       sum("rows")::BIGINT AS "rows"
FROM grouped GROUP BY host, boot_id, island
"""


# The islands, keeping per host the MAX_BOOTS_PER_HOST incarnations committed last and per incarnation its
# MAX_RANGES_PER_BOOT highest ranges (what the memory keeps, so a restart loads no more than it had).
_BOUNDED = f"""
WITH islands AS ({_ISLANDS}),
boots AS (
  SELECT host, boot_id,
         row_number() OVER (PARTITION BY host ORDER BY max(committed_ts) DESC, boot_id DESC) AS recent
  FROM islands GROUP BY host, boot_id
)
SELECT i.host, i.boot_id, i.seq_lo, i.seq_hi, i.committed_ts, i."rows"
FROM islands i JOIN boots b ON i.host = b.host AND i.boot_id = b.boot_id
WHERE b.recent <= {MAX_BOOTS_PER_HOST}
QUALIFY row_number() OVER (PARTITION BY i.host, i.boot_id ORDER BY i.seq_hi DESC) <= {MAX_RANGES_PER_BOOT}
"""


def compact(con: duckdb.DuckDBPyConnection) -> int:
    """Merge the ledger's rows into ranges, within the bounds above (call inside a transaction); return the
    rows it has now."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE __ledger_compact AS {_BOUNDED}")
    con.execute("DELETE FROM ingest_ledger")
    con.execute("INSERT INTO ingest_ledger SELECT * FROM __ledger_compact")
    con.execute("DROP TABLE __ledger_compact")
    row = con.execute("SELECT count(*) FROM ingest_ledger").fetchone()
    return int(row[0]) if row else 0
