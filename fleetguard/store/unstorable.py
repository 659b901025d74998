"""Values a column cannot hold, found in Python before any SQL runs, so the store can name the rows at fault.

Parsers at the edge check what they read (fleetguard.records.bounds); this is the store's own last line: a
value past its column's range that got through would otherwise make DuckDB refuse the whole batch, and the
agent would have to find the row by trial. Only the integer and timestamp columns are checked (a DOUBLE holds
any float, inf and NaN included), and on the fast path (a column of plain numbers) by min, max and sum in C.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fleetguard.records.bounds import INTEGER_RANGES, SqlType, fits
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


def timestamps_ok(values: Sequence[Any]) -> bool:
    """Whether every value is a storable time, at C speed for the usual column of plain numbers: True means
    `bad_timestamps` would find nothing; False means it must look (it may still find nothing)."""
    if not values or not all(type(v) is float or type(v) is int for v in values):
        return not values
    try:
        low, high = min(values), max(values)
        return math.isfinite(sum(values)) and max(-low, high) <= TIMESTAMP_LIMIT_SECONDS
    except OverflowError:  # an int too large for a float
        return False


def integers_ok(sql_type: SqlType, values: Sequence[Any]) -> bool:
    """Whether no int is outside `sql_type`'s range, at C speed for a column of plain numbers: True means
    `bad_integers` would find nothing; False means it must look (it may still find nothing)."""
    low, high = INTEGER_RANGES[sql_type]
    try:
        return not values or (low <= min(values) and max(values) <= high)
    except TypeError:  # None (NULL) or a value of another type among them
        return False


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
