"""Reads what the store gained since the last round, for the incident engine (the controller and `up`).

Each table is followed by its ingest sequence (fleetguard.store.ingest_order), never by the rows' own times:
an agent's backlog, an event stored after its repeats were folded, a finding stamped before one already read
all arrive with times earlier than rows already handed on, and are new all the same. Where each table got to
(`SeqMark`) is stored in `diagnosis_feed_marks` in the round's transaction, so a restart resumes exactly
there, and the rules' per-GPU state is rebuilt from the rows handed on before it (`restore_rules`).

A round's cost follows the rows that are new, and of those, what a rule can act on: port counters that did
not move (nearly all of them) are folded in SQL into one reading per port; only counters a rule has and that
rose come back as records.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar

import duckdb

from diagnosis.rules import GPU_ROW_ORDER, Reading, Rows, Rules, Signals, SteadyGpu
from diagnosis.rules_events import FINDING_FLEET_HOST
from diagnosis.rules_gpu import FAULT_BITS, GPU_RULE_FIELDS
from fleetguard.incidents.watermark import GRACE_SECONDS, SeqMark
from fleetguard.pacing import unpaced
from fleetguard.records.findings import Finding
from fleetguard.records.rows import enum_fields, record_from_row
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample
from fleetguard.store.incident_tables import epoch_sql
from fleetguard.store.ingest_order import SEQ_COLUMN


class _Timed(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def ts(self) -> float: ...


R = TypeVar("R", bound=_Timed)
MAX_ROWS_PER_ROUND = 500_000  # per table: a backlog is worked off over several rounds (whole statements)
# Rows converted to Python per call: one call holds the interpreter throughout (fetchall of a 2,048-host
# round's 80k GPU rows held it ~0.1 s in one piece, the request handlers waiting).
FETCH_ROWS = 4096
RESTORE_HORIZON_SECONDS = 6 * 3600.0  # a GPU silent for longer starts its counters afresh after a restart
_TIMES = frozenset({"ts", "last_ts", "slow_read_ts"})
_SEQ = SEQ_COLUMN
_FOLLOWED = ("gpu_samples", "nic_samples", "findings", "events", "nic_counters")
# A port's component as `IncidentKey.component` spells it ("port:<device>/<port>"), made by the query.
_PORT_COMPONENT = "'port:' || device || '/' || CAST(port AS VARCHAR)"


@dataclass
class StoreFeed:
    con: duckdb.DuckDBPyConnection
    # Counters some rule reads: the others only say their port was read. None: every counter row as a record.
    telling_counters: frozenset[str] | None = None
    # The temperature the GPU rules warn at: with it, the GPU rows of steady hosts come summed up
    # (`_GpuSplit`); None: every GPU row, as rows.
    temperature_warn: float | None = None
    grace_seconds: float = GRACE_SECONDS
    max_rows: int = MAX_ROWS_PER_ROUND
    marks: dict[str, SeqMark] = field(default_factory=dict)
    # Called between chunks of rows fetched: where the caller may let other threads run (fleetguard.pacing).
    pace: Callable[[], None] = field(default=unpaced, repr=False)
    _columns: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def open(
        cls,
        con: duckdb.DuckDBPyConnection,
        telling_counters: frozenset[str] | None = None,
        temperature_warn: float | None = None,
    ) -> StoreFeed:
        """A feed that takes up where the last stored round left off (from the start on a new store)."""
        rows = con.execute("SELECT table_name, floor, seen_json, horizon_json FROM diagnosis_feed_marks")
        marks = {
            name: SeqMark.from_json(floor, seen, horizon) for name, floor, seen, horizon in rows.fetchall()
        }
        return cls(con, telling_counters, temperature_warn, marks=marks)

    def read(self, now: float) -> Signals:
        """The rows stored since the last call, oldest first; the marks are stored with them."""
        new = self._new(_FOLLOWED, now)
        split = self._gpu_split(new)
        signals = Signals(
            gpu_rows=Rows() if split is not None else self._gpu_rows(new),
            gpu_source=split,
            nic_rows=self._rows("nic_samples", new, NicSample),
            findings=self._records("findings", new, Finding),
            events=self._records("events", new, Event),
            **self._counters(new),
        )
        self._save()
        return signals

    def restore_rules(self, rules: Rules, horizon_seconds: float = RESTORE_HORIZON_SECONDS) -> set[str]:
        """Give `rules` the state the rows handed on before a restart leave: each GPU's newest sample, when
        each port was last read. Returns the hosts they came from."""
        gpu_mark = self.marks.get("gpu_samples", SeqMark())
        handed, params = _handed_on(gpu_mark)
        names = _present(self.con, "gpu_samples", GpuSample, GPU_RULE_FIELDS)
        rows = self.con.execute(
            f"SELECT {_select_list(names)} FROM gpu_samples WHERE {handed} AND ts >= "
            f"(SELECT max(ts) FROM gpu_samples WHERE {handed}) - to_microseconds(CAST(? * 1e6 AS BIGINT)) "
            f"QUALIFY row_number() OVER (PARTITION BY host, uuid ORDER BY ts DESC, {_SEQ} DESC) = 1",
            [*params, *params, horizon_seconds],
        ).fetchall()
        samples = _build(GpuSample, names, rows)
        readings = self._port_readings(self.marks.get("nic_counters", SeqMark()), horizon_seconds)
        rules.restore(samples, readings)
        return {s.host for s in samples} | {r.host for r in readings}

    # ---- internals ------------------------------------------------------------------------------------

    def _gpu_rows(self, new: dict[str, tuple[str, list[object]]], skip_hosts: Sequence[str] = ()) -> Rows:
        return self._rows("gpu_samples", new, GpuSample, GPU_RULE_FIELDS, GPU_ROW_ORDER, skip_hosts)

    def _gpu_split(self, new: dict[str, tuple[str, list[object]]]) -> _GpuSplit | None:
        """The round's steady GPUs summed up in SQL (`SteadyGpu`), one row per GPU in place of one per
        sample; None without a temperature to judge them by, or on a store without every column a GPU rule
        reads. At 1 Hz nearly every GPU of a fleet is steady, and each of its rows cost the round a fetch
        and a step of Python while it held the interpreter's lock beside the request handlers."""
        where, params = new["gpu_samples"]
        if self.temperature_warn is None or where == "false":
            return None
        if set(self._present("gpu_samples", GpuSample, GPU_RULE_FIELDS)) != GPU_RULE_FIELDS:
            return None
        events_where, events_params = new["events"]
        findings_where, findings_params = new["findings"]
        result = self.con.execute(
            _steady_sql(where, events_where, findings_where),
            [
                FAULT_BITS,
                self.temperature_warn,
                *params,
                *events_params,
                FINDING_FLEET_HOST,
                *findings_params,
            ],
        )
        return _GpuSplit(self, new, list(map(SteadyGpu._make, self._fetch(result))))

    def _port_readings(self, mark: SeqMark, horizon_seconds: float) -> list[Reading]:
        handed, params = _handed_on(mark)
        rows = self.con.execute(
            f"SELECT host, {_PORT_COMPONENT}, {epoch_sql('max(ts)')} FROM nic_counters WHERE {handed} "
            f"AND ts >= (SELECT max(ts) FROM nic_counters WHERE {handed}) "
            "- to_microseconds(CAST(? * 1e6 AS BIGINT)) GROUP BY host, device, port",
            [*params, *params, horizon_seconds],
        ).fetchall()
        return list(map(Reading._make, rows))

    def _new(self, tables: Sequence[str], now: float) -> dict[str, tuple[str, list[object]]]:
        """Each table's filter for this round's rows (whole statements, within the row budget), from one
        query for all of them; their values are recorded as handed on."""
        parts: list[str] = []
        params: list[object] = []
        for table in tables:
            where, values = _unread(self.marks.setdefault(table, SeqMark()))
            parts.append(f"SELECT ? AS t, {_SEQ} AS v, count(*) AS n FROM {table} WHERE {where} GROUP BY 2")
            params += [table, *values]
        counts: dict[str, list[tuple[int, int]]] = {table: [] for table in tables}
        for table, value, n in self.con.execute(
            " UNION ALL ".join(parts) + " ORDER BY t, v", params
        ).fetchall():
            counts[table].append((int(value), int(n)))
        return {table: self._take(table, counts[table], now) for table in tables}

    def _take(self, table: str, counts: list[tuple[int, int]], now: float) -> tuple[str, list[object]]:
        chosen: list[int] = []
        total = 0
        for value, n in counts:
            if chosen and total + n > self.max_rows:
                break
            chosen.append(value)
            total += n
        self.marks[table].take(chosen, now, self.grace_seconds)
        if not chosen:
            return "false", []
        # Exactly the statements counted: outside a transaction another may commit between the two queries.
        return f"{_SEQ} BETWEEN ? AND ? AND {_SEQ} IN (SELECT unnest(?::BIGINT[]))", [
            chosen[0],
            chosen[-1],
            chosen,
        ]

    def _present(self, table: str, record: type, only: frozenset[str] | None = None) -> list[str]:
        """`_present`, with the table's columns read once (the schema is settled when the store opens)."""
        columns = self._columns.get(table)
        if columns is None:
            columns = self._columns[table] = _columns(self.con, table)
        return [f.name for f in fields(record) if f.name in columns and (only is None or f.name in only)]

    def _records(
        self,
        table: str,
        new: dict[str, tuple[str, list[object]]],
        record: type[R],
        only: frozenset[str] | None = None,
    ) -> list[R]:
        where, params = new[table]
        names = self._present(table, record, only)
        rows = self.con.execute(
            f"SELECT {_select_list(names)} FROM {table} WHERE {where} ORDER BY {_order(names)}", params
        ).fetchall()
        return _build(record, names, rows)

    def _rows(
        self,
        table: str,
        new: dict[str, tuple[str, list[object]]],
        record: type,
        only: frozenset[str] | None = None,
        first: tuple[str, ...] = (),
        skip_hosts: Sequence[str] = (),
    ) -> Rows:
        """This round's rows of a sample table as plain rows (the rules build a record only of a row they
        act on); every field of `record` (in `only`) is a column, `first` first, NULL where an older
        store lacks it. The rows of `skip_hosts` are left out."""
        where, params = new[table]
        if skip_hosts and where != "false":
            where, params = f"{where} AND host NOT IN (SELECT unnest(?::VARCHAR[]))", [*params, skip_hosts]
        present = set(self._present(table, record, only))
        names = [
            *first,
            *(f.name for f in fields(record) if (only is None or f.name in only) and f.name not in first),
        ]
        select = ", ".join(
            (epoch_sql(n) if n in _TIMES else f'"{n}"') if n in present else f'NULL AS "{n}"' for n in names
        )
        order = _order([n for n in names if n in present])
        result = self.con.execute(f"SELECT {select} FROM {table} WHERE {where} ORDER BY {order}", params)
        return Rows(tuple(names), self._fetch(result))

    def _fetch(self, result: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
        """A result's rows, FETCH_ROWS at a time with `pace` between (the same rows fetchall gives)."""
        rows: list[tuple[Any, ...]] = []
        while True:
            self.pace()
            chunk = result.fetchmany(FETCH_ROWS)
            if not chunk:
                return rows
            rows += chunk

    def _counters(self, new: dict[str, tuple[str, list[object]]]) -> dict[str, Any]:
        if self.telling_counters is None:
            return {"nic_counters": self._records("nic_counters", new, NicCounterSample)}
        where, params = new["nic_counters"]
        names = self._present("nic_counters", NicCounterSample)
        # Exactly the rows `counter_observation` can act on (a rule, no reset, a rise).
        telling = "counter IN (SELECT unnest(?)) AND NOT reset AND delta > 0"
        rows = self.con.execute(
            f"SELECT {_select_list(names)} FROM nic_counters WHERE {where} AND {telling} "
            f"ORDER BY {_order(names)}",
            [*params, sorted(self.telling_counters)],
        ).fetchall()
        reads = self.con.execute(
            f"SELECT host, {_PORT_COMPONENT}, {epoch_sql('max(ts)')} FROM nic_counters WHERE {where} "
            "GROUP BY host, device, port ORDER BY host, device, port",
            params,
        ).fetchall()
        return {
            "nic_counters": _build(NicCounterSample, names, rows),
            "readings": list(map(Reading._make, reads)),
        }

    def _save(self) -> None:
        """Every table's mark, in one statement (each statement costs milliseconds on its own)."""
        if not self.marks:
            return
        values: list[object] = []
        for table, mark in self.marks.items():
            values += [table, mark.floor, *mark.to_json()]
        self.con.execute(
            "INSERT OR REPLACE INTO diagnosis_feed_marks VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * len(self.marks)),
            values,
        )


@dataclass
class _GpuSplit:
    """A round's GPU rows as `diagnosis.rules.GpuRowSource`: the steady GPUs summed up, the other rows
    fetched when the rules ask (in the same transaction and by the same statements: the same rows)."""

    feed: StoreFeed
    new: dict[str, tuple[str, list[object]]]
    steady: list[SteadyGpu]

    def rows(self, hosts: Collection[str]) -> Rows:
        skip = sorted({g.host for g in self.steady}.difference(hosts))
        return self.feed._gpu_rows(self.new, skip)


# The GPU columns the rules read as one value per GPU when it is steady (GPU_ROW_ORDER after ts).
_STEADY_COLUMNS = ("gpu_index", "pci_bus_id", *GPU_ROW_ORDER[1:5])


def _steady_sql(gpu_where: str, events_where: str, findings_where: str) -> str:
    """Each GPU of the hosts whose every GPU row this round is steady: one value in each of
    `_STEADY_COLUMNS` (NULL in all its rows, or the same in all), and none a row `rules_gpu.may_fault`
    could call a fault without a counter's rise (keep in step: NULL is false there as `or` takes None,
    a NaN temperature counts here as a fault, which only sends its host the row-by-row way); and no event
    or finding of the host this round (either may make one of its GPUs fault in the round, whose quiet
    rows are then built; a finding without a host is the rules' `FINDING_FLEET_HOST`'s). Parameters:
    FAULT_BITS, the warning temperature, the gpu where's, the events where's, FINDING_FLEET_HOST, then the
    findings where's."""
    same = " AND ".join(
        f'(count("{c}") = 0 OR (count("{c}") = count(*) AND min("{c}") = max("{c}")))'
        for c in _STEADY_COLUMNS
    )
    fault = (
        "coalesce(remapped_rows_failure, false) OR coalesce(remapped_rows_pending, false) "
        "OR coalesce((clocks_event_reasons & ?) <> 0, false) OR coalesce(temperature_celsius >= ?, false)"
    )
    says = "coalesce(remapped_rows_pending = false, false) OR clocks_event_reasons IS NOT NULL"
    values = ", ".join(f'min("{c}") AS "{c}"' for c in _STEADY_COLUMNS)
    return (
        f"WITH g AS (SELECT host, uuid, {same} AND NOT bool_or({fault}) AS steady, bool_or({says}) AS says, "
        f"max(ts) AS ts, {values} FROM gpu_samples WHERE {gpu_where} GROUP BY host, uuid), "
        "h AS (SELECT host FROM g GROUP BY host HAVING bool_and(steady) "
        f"EXCEPT SELECT host FROM events WHERE {events_where} "
        f"EXCEPT SELECT coalesce(nullif(host, ''), ?) FROM findings WHERE {findings_where}) "
        f"SELECT host, uuid, gpu_index, pci_bus_id, {epoch_sql('ts')}, "
        + ", ".join(f'"{c}"' for c in GPU_ROW_ORDER[1:5])
        + ", says FROM g WHERE host IN (SELECT host FROM h) ORDER BY host, uuid"
    )


def _unread(mark: SeqMark) -> tuple[str, list[object]]:
    where = [f"{_SEQ} > ?"]
    params: list[object] = [mark.floor]
    for lo, hi in mark.exclusions():
        where.append(f"{_SEQ} NOT BETWEEN ? AND ?")
        params += [lo, hi]
    return " AND ".join(where), params


def _handed_on(mark: SeqMark) -> tuple[str, list[object]]:
    where = [f"{_SEQ} <= ?"]
    params: list[object] = [mark.floor]
    for lo, hi in mark.exclusions():
        where.append(f"{_SEQ} BETWEEN ? AND ?")
        params += [lo, hi]
    return "(" + " OR ".join(where) + ")", params


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}


def _present(
    con: duckdb.DuckDBPyConnection, table: str, record: type, only: frozenset[str] | None = None
) -> list[str]:
    existing = _columns(con, table)
    names = [f.name for f in fields(record)]
    return [n for n in names if n in existing and (only is None or n in only)]


def _select_list(names: Sequence[str]) -> str:
    return ", ".join(epoch_sql(n) if n in _TIMES else f'"{n}"' for n in names)


def _order(names: Sequence[str]) -> str:
    """Time first, then the statement, then every column: the same rows always come in the same order."""
    rest = [f'"{n}"' for n in names if n != "ts"]
    return ", ".join(["ts", _SEQ, *rest])


def _build(record: type[R], names: Sequence[str], rows: list[tuple[Any, ...]]) -> list[R]:
    if enum_fields(record):
        typed = (record_from_row(record, dict(zip(names, row, strict=True))) for row in rows)
        # A row whose kind this version does not know matches no rule: it stays in the store, unread here.
        return [r for r in typed if r is not None]
    build: Callable[..., R] = record  # samples: no enum field, the per-row cost stays one call
    return [build(**dict(zip(names, row, strict=True))) for row in rows]


def select_records(
    con: duckdb.DuckDBPyConnection,
    table: str,
    record: type[R],
    where: str,
    params: Sequence[object],
    only: frozenset[str] | None = None,
) -> list[R]:
    """Rows of `table` as `record`s, oldest first (a column an older store lacks, or one left out of `only`,
    takes its default). For replays over time ranges; rounds read through `StoreFeed`."""
    try:
        names = _present(con, table, record, only)
    except duckdb.Error:
        return []
    rows = con.execute(
        f"SELECT {_select_list(names)} FROM {table} WHERE {where} ORDER BY ts LIMIT {MAX_ROWS_PER_ROUND}",
        list(params),
    ).fetchall()
    return _build(record, names, rows)
