"""Table definitions derived from the record dataclasses, so a record and its table are defined once."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fleetguard.records.findings import ActionRecord, Finding
from fleetguard.records.prediction import Prediction
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample

# Fields holding UTC epoch seconds in Python and TIMESTAMP in DuckDB.
TIMESTAMP_FIELDS = frozenset({"ts", "last_ts", "slow_read_ts"})

_SQL_TYPES: dict[type, str] = {float: "DOUBLE", int: "BIGINT", str: "VARCHAR", bool: "BOOLEAN"}

# Hardware counters are unsigned 64-bit; a value past 2**63 must not make a whole batch fail.
_TYPE_OVERRIDES: dict[tuple[type, str], str] = {(NicCounterSample, "value"): "UBIGINT"}


def quote_ident(name: str) -> str:
    """Quote an identifier for DuckDB (some field names, like `group`, are SQL keywords)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    nullable: bool
    default_sql: str | None = None  # SQL literal for a non-None dataclass default

    @property
    def required(self) -> bool:
        """A batch must carry this column: it can be neither NULL nor defaulted."""
        return not self.nullable and self.default_sql is None

    @property
    def is_timestamp(self) -> bool:
        return self.sql_type == "TIMESTAMP"


@dataclass(frozen=True)
class Table:
    name: str
    record: type
    columns: tuple[Column, ...]
    # Parquet export partitions by day and, where the table has one, by host.
    partition_by_host: bool

    def create_sql(self) -> str:
        cols = ",\n  ".join(
            f"{quote_ident(c.name)} {c.sql_type}{'' if c.nullable else ' NOT NULL'}"
            + (f" DEFAULT {c.default_sql}" if c.default_sql is not None else "")
            for c in self.columns
        )
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  {cols}\n)"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _column(name: str, annotation: Any, override: str | None = None) -> Column:
    nullable = False
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        non_none = [a for a in args if a is not type(None)]
        nullable = len(non_none) != len(args)
        if len(non_none) != 1:
            raise TypeError(f"field {name}: unions other than `T | None` have no column type")
        annotation = non_none[0]
    if override is not None:
        return Column(name, override, nullable)
    if name in TIMESTAMP_FIELDS:
        return Column(name, "TIMESTAMP", nullable)
    for py_type, sql in _SQL_TYPES.items():
        if annotation is py_type:
            return Column(name, sql, nullable)
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return Column(name, "VARCHAR", nullable)  # a member is stored as its text
    raise TypeError(f"field {name}: no column type for {annotation!r}")


def _default_sql(default: object) -> str | None:
    if default is dataclasses.MISSING or default is None:
        return None
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, int | float):
        return repr(default)
    if isinstance(default, str):
        return "'" + default.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for default {default!r}")


def table_for(name: str, record: type) -> Table:
    hints = typing.get_type_hints(record)
    columns = tuple(
        dataclasses.replace(
            _column(f.name, hints[f.name], _TYPE_OVERRIDES.get((record, f.name))),
            default_sql=_default_sql(f.default),
        )
        for f in dataclasses.fields(record)
    )
    return Table(name, record, columns, partition_by_host=any(c.name == "host" for c in columns))


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        table_for("gpu_samples", GpuSample),
        table_for("nic_samples", NicSample),
        table_for("nic_counters", NicCounterSample),
        table_for("events", Event),
        table_for("heartbeats", Heartbeat),
        table_for("step_timings", StepTiming),
        table_for("collective_progress", CollectiveProgress),
        table_for("findings", Finding),
        table_for("actions", ActionRecord),
        table_for("predictions", Prediction),
    )
}

TABLE_BY_RECORD: dict[type, Table] = {t.record: t for t in TABLES.values()}
