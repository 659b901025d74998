"""Reads what the store gained since the last round, for the incident engine in `fleetguard up`.

Samples, counters and findings are read past a per-host watermark (a host's rows arrive in time order, one
flush at a time). Events can arrive late (repeats are folded for a window before they are stored), so they
are read again over an overlap and the ones already handed on are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar

import duckdb

from diagnosis.rules import Signals
from diagnosis.rules_gpu import GPU_RULE_FIELDS
from fleetguard.records.findings import Finding
from fleetguard.records.rows import record_from_row
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample
from fleetguard.store.incident_tables import epoch_sql, ts_sql


class _Timed(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def ts(self) -> float: ...


R = TypeVar("R", bound=_Timed)
MAX_ROWS_PER_ROUND = 500_000  # per table: a backlog is worked off over several rounds
_TIMES = frozenset({"ts", "last_ts", "slow_read_ts"})


@dataclass
class StoreFeed:
    con: duckdb.DuckDBPyConnection
    start: float  # nothing older than this is read (the time the service started, less the overlap)
    event_overlap_seconds: float = 120.0
    _marks: dict[str, dict[str, float]] = field(default_factory=dict)  # table -> host -> last ts read
    _seen_events: dict[tuple[Any, ...], float] = field(default_factory=dict)

    def read(self) -> Signals:
        return Signals(
            gpu_samples=self._new("gpu_samples", GpuSample, GPU_RULE_FIELDS),
            nic_samples=self._new("nic_samples", NicSample),
            nic_counters=self._new("nic_counters", NicCounterSample),
            findings=self._new("findings", Finding),
            events=self._events(),
        )

    def _new(self, table: str, record: type[R], only: frozenset[str] | None = None) -> list[R]:
        marks = self._marks.setdefault(table, {})
        since = min(marks.values(), default=self.start)
        rows = self._select(table, record, since, strictly_after=True, only=only)
        out = []
        for row in rows:
            host = str(getattr(row, "host", "") or "")
            ts = float(row.ts)
            if ts > marks.get(host, self.start):
                out.append(row)
        for row in out:
            host = str(getattr(row, "host", "") or "")
            marks[host] = max(marks.get(host, self.start), float(row.ts))
        return out

    def _events(self) -> list[Event]:
        newest = max(self._seen_events.values(), default=self.start)
        since = max(self.start, newest - self.event_overlap_seconds)
        out = []
        for event in self._select("events", Event, since, strictly_after=False):
            identity = (event.ts, event.host, event.kind, event.code, event.device, event.seq, event.message)
            if identity in self._seen_events:
                continue
            self._seen_events[identity] = event.ts
            out.append(event)
        cutoff = since - self.event_overlap_seconds
        self._seen_events = {k: t for k, t in self._seen_events.items() if t >= cutoff}
        return out

    def _select(
        self,
        table: str,
        record: type[R],
        since: float,
        strictly_after: bool,
        only: frozenset[str] | None = None,
    ) -> list[R]:
        op = ">" if strictly_after else ">="
        return select_records(self.con, table, record, f"ts {op} {ts_sql()}", [since], only)


def select_records(
    con: duckdb.DuckDBPyConnection,
    table: str,
    record: type[R],
    where: str,
    params: Sequence[object],
    only: frozenset[str] | None = None,
) -> list[R]:
    """Rows of `table` as `record`s, oldest first (a column an older store lacks, or one left out of `only`,
    takes its default)."""
    names = [f.name for f in fields(record)]
    try:
        existing = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    except duckdb.Error:
        return []
    present = [n for n in names if n in existing and (only is None or n in only)]
    cols = ", ".join(epoch_sql(n) if n in _TIMES else f'"{n}"' for n in present)
    rows = con.execute(
        f"SELECT {cols} FROM {table} WHERE {where} ORDER BY ts LIMIT {MAX_ROWS_PER_ROUND}", list(params)
    ).fetchall()
    typed = (record_from_row(record, dict(zip(present, row, strict=True))) for row in rows)
    # A row whose kind this version does not know matches no rule: it stays in the store, unread here.
    return [r for r in typed if r is not None]
