"""A group of checked batches as one column set per table, in the arrays DuckDB scans fastest."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

import duckdb
import numpy as np

from fleetguard.store.ingest_order import ORDERED_TABLES, SEQ_COLUMN, statement_seq_sql
from fleetguard.store.schema import TABLES, Column, Table, quote_ident

# The numpy type that holds each column type exactly; others (VARCHAR) travel as Python objects.
_DTYPES = {"BIGINT": np.int64, "UBIGINT": np.uint64, "DOUBLE": np.float64, "TIMESTAMP": np.float64}


def _defaults(table: Table) -> dict[str, object]:
    """What a column a batch left out holds: the record field's default, else NULL."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(table.record):
        out[f.name] = None if f.default is dataclasses.MISSING else f.default
    return out


_DEFAULTS = {name: _defaults(table) for name, table in TABLES.items()}


def concat(table: Table, parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The columns of several batches for one table, one array per column (a column a batch lacks is its
    default there). Columns that are NULL in every row are left out: the INSERT leaves them NULL, and DuckDB
    converts a column of Python None objects one value at a time (half the cost of a GPU sample insert)."""
    lengths = [len(next(iter(p.values()))) for p in parts]
    defaults = _DEFAULTS[table.name]
    out: dict[str, Any] = {}
    for column in table.columns:
        got_parts = [part.get(column.name) for part in parts]
        if all(isinstance(got, np.ndarray) for got in got_parts):
            # Arrays of the column's dtype from the edge processes (edge_wire): joined in one step.
            joined: Any = np.concatenate(cast(list[Any], got_parts))
            array = _microseconds(joined) if column.is_timestamp else joined
        else:
            values: list[Any] = []
            for got, n in zip(got_parts, lengths, strict=True):
                if isinstance(got, np.ndarray):
                    values.extend(got.tolist())
                else:
                    values.extend(got if got is not None else [defaults[column.name]] * n)
            array = as_array(column, values)
        if column.nullable and _all_null(array):
            continue
        out[column.name] = array
    return out


def as_array(column: Column, values: list[Any]) -> Any:
    """`values` as the array DuckDB scans fastest, in the column's own type where numpy has it, so the INSERT
    needs no expression per column (each cost DuckDB ~0.05 ms to bind and run per statement, ~3 ms of a GPU
    sample insert). Converted in C: no Python step per value. NULL in a float column is NaN and in a time
    column NaT, both of which DuckDB's scan reads as NULL (no value from outside is NaN: the edge refuses
    it); an integer column with a NULL, and a text column, are Python objects (cast by insert_sql)."""
    dtype = _DTYPES.get(column.sql_type)
    if column.is_timestamp:
        return _microseconds(np.array(values, dtype=np.float64))
    if dtype is np.float64:
        return np.array(values, dtype=np.float64)
    if dtype is not None:
        try:
            return np.array(values, dtype=dtype)
        except TypeError:  # a None among them: numpy has no NULL integer
            pass
    elif column.sql_type == "BOOLEAN" and None not in values:  # numpy would take None for False
        return np.array(values, dtype=np.bool_)
    objects = np.empty(len(values), dtype=object)
    objects[:] = values
    return objects


def _microseconds(seconds: Any) -> Any:
    """Epoch seconds (NaN: NULL) as TIMESTAMP's microseconds, rounded half away from zero as DuckDB's
    round() did when the INSERT converted them."""
    null = np.isnan(seconds)
    scaled = np.where(null, 0.0, seconds) * 1_000_000
    out = np.trunc(scaled + np.copysign(0.5, scaled)).astype(np.int64).astype("datetime64[us]")
    out[null] = np.datetime64("NaT")
    return out


def _all_null(array: Any) -> bool:
    if array.dtype == np.float64:
        return bool(np.isnan(array).all())
    if array.dtype.kind == "M":
        return bool(np.isnat(array).all())
    return array.dtype == object and all(v is None for v in array)


def insert_sql(table: Table, view: str, columns: dict[str, Any]) -> str:
    """INSERT of `columns` (as_array's) from `view`: a column in its own type is read as it is, an object
    column is cast to its type (DuckDB would otherwise infer it from the values)."""
    chosen = [c for c in table.columns if c.name in columns]
    exprs = [
        quote_ident(c.name)
        if columns[c.name].dtype != np.dtype(object)
        else f"CAST({quote_ident(c.name)} AS {c.sql_type})"
        for c in chosen
    ]
    names = [quote_ident(c.name) for c in chosen]
    if table.name in ORDERED_TABLES:  # one ingest sequence value for the statement (store/ingest_order.py)
        names.append(quote_ident(SEQ_COLUMN))
        exprs.append(statement_seq_sql(table.name))
    return f"INSERT INTO {table.name} ({', '.join(names)}) SELECT {', '.join(exprs)} FROM {view}"


def insert_records(con: duckdb.DuckDBPyConnection, records: Sequence[object]) -> None:
    """Insert record dataclasses the controller makes itself (findings) on the writer's connection."""
    import contextlib

    from fleetguard.shipping.wire import columns_by_table

    for name, columns in columns_by_table(records).items():
        view = f"__controller_{name}"
        arrays = concat(TABLES[name], [columns])
        con.register(view, arrays)
        try:
            con.execute(insert_sql(TABLES[name], view, arrays))
        finally:
            with contextlib.suppress(duckdb.Error):
                con.unregister(view)
