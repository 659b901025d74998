"""Values a column cannot hold, found in Python before any SQL runs, so the store can name the rows at fault.

Parsers at the edge check what they read (fleetguard.records.bounds); this is the store's own last line: a
value past its column's range that got through would otherwise make DuckDB refuse the whole batch, and the
agent would have to find the row by trial. Only the integer and timestamp columns are checked (a DOUBLE holds
any float, inf and NaN included), and on the fast path (a column numpy converts whole) at numpy speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fleetguard.records.bounds import SqlType, fits
from fleetguard.store.schema import Column

# DuckDB's TIMESTAMP is microseconds since 1970 in an int64: +-9.2e12 s (about year 294,000). Epoch seconds
# beyond that (or inf, NaN) make the store's conversion fail.
TIMESTAMP_LIMIT_SECONDS = 9.2e12


class UnstorableRows(Exception):
    """Rows of one table that its columns cannot hold; nothing of the batch was written.

    `rows` pairs each such record with the reason, which names the field and value."""

    def __init__(self, table: str, rows: list[tuple[object, str]]) -> None:
        super().__init__(f"{table}: {len(rows)} rows hold values their columns cannot: {rows[0][1]}")
        self.table = table
        self.rows = rows


def integer_type(column: Column) -> SqlType | None:
    """The range-checked integer type of `column`, or None for columns that are not integers."""
    try:
        sql_type = SqlType(column.sql_type)
    except ValueError:
        return None
    return None if sql_type is SqlType.DOUBLE else sql_type


def bad_integers(column: Column, sql_type: SqlType, values: Sequence[Any]) -> dict[int, str]:
    """Index -> reason for each int of an integer column outside its type's range (other types are left to
    DuckDB's conversion, as before)."""
    return {
        i: f"{column.name}={_short(v)} is outside {sql_type.value}"
        for i, v in enumerate(values)
        if type(v) is int and not fits(sql_type, v)
    }


def bad_timestamps(column: Column, values: Sequence[Any]) -> dict[int, str]:
    """Index -> reason for each non-None epoch-seconds value a TIMESTAMP cannot hold."""
    return {
        i: f"{column.name}={_short(v)} is not a time a TIMESTAMP holds"
        for i, v in enumerate(values)
        if v is not None and not _timestamp_ok(v)
    }


def timestamps_ok(array: Any) -> bool:
    """Whether every value of a float64 numpy array of epoch seconds is a storable time (vectorised)."""
    import numpy as np

    return bool(np.all(np.abs(array) <= TIMESTAMP_LIMIT_SECONDS))  # False for NaN too


def _timestamp_ok(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and abs(value) <= TIMESTAMP_LIMIT_SECONDS
    except OverflowError:
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
