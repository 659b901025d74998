"""What every query module shares: the cursor type and what hands cursors out, epoch-seconds parameters,
optional tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol, TypeAlias

import duckdb

Cursor: TypeAlias = duckdb.DuckDBPyConnection
Row: TypeAlias = tuple[Any, ...]


class StoreReader(Protocol):
    """Anything that hands out a read cursor of its own per call: `fleetguard.store.Store` does."""

    def cursor(self) -> Cursor: ...


# A bound epoch-seconds parameter as a TIMESTAMP (UTC, microseconds), as the store writes them. The cast to
# DOUBLE first: a Python int parameter would otherwise be multiplied as a 32-bit integer and overflow.
TS: Final = "make_timestamp(CAST(round(CAST(? AS DOUBLE) * 1000000) AS BIGINT))"


def fetch(cur: Cursor, sql: str, params: Sequence[object] = ()) -> list[Row]:
    return cur.execute(sql, list(params)).fetchall()


def tables(cur: Cursor) -> set[str]:
    """Tables of the store: pages built on tables that other parts add later say so rather than fail."""
    return {str(r[0]) for r in fetch(cur, "SELECT table_name FROM duckdb_tables()")}


def as_int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def as_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


# The start (epoch seconds) of the row's time bucket; the bound parameter is the bucket width in seconds.
BUCKET: Final = "epoch(time_bucket(to_microseconds(CAST(CAST(? AS DOUBLE) * 1000000 AS BIGINT)), ts))"


def host_rows(table: str, time_column: str, columns: str) -> str:
    """A `host_rows` CTE: `columns` of one host's rows of `table` in a time window (parameters: since, until,
    host), for a query that then picks one GPU out of them by its UUID.

    Rows are stored in time order, every GPU in every row group, so picking one GPU's UUID out of a window
    tests every GPU's UUID in each dictionary segment there (16,384 strings of 40 characters at 2,048 hosts:
    30-60 ms a window, BENCHMARKS.md "First render, session 8"); its host is 8 times fewer, shorter strings.
    MATERIALIZED keeps DuckDB from pushing the UUID test back down into the scan."""
    return (
        f"WITH host_rows AS MATERIALIZED (SELECT {columns} FROM {table} "
        f"WHERE {time_column} >= {TS} AND {time_column} <= {TS} AND host = ?)"
    )
