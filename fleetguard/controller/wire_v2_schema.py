"""Wire version 2 (`fleetguard.shipping.wire_v2`) read into the columns a checked batch holds: the telemetry
tables' number columns as numpy arrays over the body's own bytes, their text columns as object arrays built
by one index into the distinct values, every other column as version 1's typed lists.

Every type is checked while the body is decoded (msgspec, in C) or by a few numpy calls per table, never by
a Python step per value: an array's length against its table's row count, a number column's array type
against its store column's (float64 for DOUBLE and TIMESTAMP, int64 BIGINT, uint64 UBIGINT: every value of
those types fits its column), no infinity, NULL (NaN, code 0) only where the column takes it, each code
naming one of the values sent. What is left is what version 1's typed batches leave to
`validate.check_batch` too: the times' range, whose host a row names, the findings' kinds. A refusal names
the same reason (400 malformed, or invalid value) as version 1's for the same fault.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import UNSET, Meta, UnsetType

from fleetguard.controller.wire_schema import MAX_TEXT_CHARS, optional_columns_struct, present_columns
from fleetguard.shipping.wire_v2 import ARRAY_TABLES, WIRE_VERSION_2
from fleetguard.store.schema import TABLES, Column

# A batch holds at most validate.MAX_ROWS rows (checked once it is read); a table's own count above it is
# refused before any array is sized by it.
MAX_TABLE_ROWS = 1_000_000
_DTYPES = {
    "DOUBLE": np.dtype("<f8"),
    "TIMESTAMP": np.dtype("<f8"),
    "BIGINT": np.dtype("<i8"),
    "UBIGINT": np.dtype("<u8"),
}
_CODES = np.dtype("<u4")


class WireV2Refused(ValueError):
    """A version-2 body that is not a batch (`malformed`), or holds a value its column cannot (not)."""

    def __init__(self, message: str, *, malformed: bool) -> None:
        super().__init__(message)
        self.malformed = malformed


class _Texts(msgspec.Struct, forbid_unknown_fields=True):
    values: list[Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]]
    codes: bytes


def _table_struct(name: str) -> Any:
    fields: list[tuple[str, Any, Any]] = [
        ("columns", optional_columns_struct(TABLES[name]) | UnsetType, UNSET),
    ]
    if name in ARRAY_TABLES:
        fields += [("numbers", dict[str, bytes], {}), ("texts", dict[str, _Texts], {})]
    return msgspec.defstruct(
        f"WireV2Table_{name}",
        [("rows", Annotated[int, Meta(ge=0, le=MAX_TABLE_ROWS)]), *fields],
        kw_only=True,
        forbid_unknown_fields=True,
    )


_TABLE_STRUCTS = {name: _table_struct(name) for name in TABLES}
_Tables = msgspec.defstruct(
    "WireV2Tables",
    [(name, struct | UnsetType, UNSET) for name, struct in _TABLE_STRUCTS.items()],
    kw_only=True,
    forbid_unknown_fields=True,
)


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    host: str
    boot_id: str
    seq: int
    sent_ts: float
    interval_seconds: float
    agent_version: str
    tables: _Tables  # type: ignore[valid-type]
    acks: list[dict[str, str]]  # each checked by shipping.commands.ack_from_json


_DECODER = msgspec.msgpack.Decoder(_Batch)
_COLUMNS = {name: {c.name: c for c in table.columns} for name, table in TABLES.items()}


def decode_v2(raw: bytes) -> dict[str, Any]:
    """An inflated version-2 body as the document `validate.check_batch` takes (typed: lists and arrays);
    WireV2Refused naming what is wrong."""
    try:
        batch = _DECODER.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec.ValidationError is a DecodeError
        raise WireV2Refused(f"batch: not a version-2 batch: {str(exc)[:200]}", malformed=True) from None
    if batch.v != WIRE_VERSION_2:
        raise WireV2Refused("batch.v: a msgpack body is version 2", malformed=True)
    tables: dict[str, dict[str, Any]] = {}
    for name in _TABLE_STRUCTS:
        table = getattr(batch.tables, name)
        if table is not UNSET:
            tables[name] = _table_columns(name, table)
    return {
        "v": batch.v,
        "host": batch.host,
        "boot_id": batch.boot_id,
        "seq": batch.seq,
        "sent_ts": batch.sent_ts,
        "interval_seconds": batch.interval_seconds,
        "agent_version": batch.agent_version,
        "tables": tables,
        "acks": batch.acks,
    }


def _table_columns(name: str, table: Any) -> dict[str, Any]:
    where = f"batch.tables.{name}"
    rows: int = table.rows
    columns: dict[str, Any] = {} if table.columns is UNSET else present_columns(table.columns)
    by_name = _COLUMNS[name]
    if name not in ARRAY_TABLES:
        return columns
    # Each array type's columns read as the rows of one array: a numpy call per table, not per column.
    by_dtype: dict[np.dtype[Any], list[tuple[Column, bytes]]] = {}
    size = rows * 8
    for column_name, raw in table.numbers.items():
        column = by_name.get(column_name)
        dtype = None if column is None else _DTYPES.get(column.sql_type)
        if column is None or dtype is None:
            raise WireV2Refused(f"{where}.numbers: no number column {column_name[:64]!r}", malformed=True)
        if column_name in columns:
            raise WireV2Refused(f"{where}.{column_name}: sent twice", malformed=True)
        if len(raw) != size:
            raise WireV2Refused(f"{where}.{column_name}: not {rows} values", malformed=True)
        by_dtype.setdefault(dtype, []).append((column, raw))
    for dtype, parts in by_dtype.items():
        block = np.frombuffer(b"".join(raw for _, raw in parts), dtype=dtype).reshape(len(parts), rows)
        if dtype.kind == "f":
            _check_floats(where, rows, parts, block)
        # (every int64 fits BIGINT and every uint64 UBIGINT: nothing to check)
        columns.update({column.name: block[i] for i, (column, _) in enumerate(parts)})
    for column_name, texts in table.texts.items():
        column = by_name.get(column_name)
        if column is None or column.sql_type != "VARCHAR":
            raise WireV2Refused(f"{where}.texts: no text column {column_name[:64]!r}", malformed=True)
        if column_name in columns:
            raise WireV2Refused(f"{where}.{column_name}: sent twice", malformed=True)
        columns[column_name] = _text_column(f"{where}.{column_name}", column, rows, texts)
    return columns


def _check_floats(where: str, rows: int, parts: list[tuple[Column, bytes]], block: Any) -> None:
    """A table's float columns, checked together: one call finds an infinity in any of them."""
    if not rows:
        return
    if np.isinf(block).any():
        first = int(np.flatnonzero(np.isinf(block).any(axis=1))[0])
        raise WireV2Refused(f"{where}.{parts[first][0].name}: non-finite number", malformed=False)
    required = [i for i, (column, _) in enumerate(parts) if not column.nullable]
    if required:
        nulls = np.isnan(block[required]).any(axis=1)
        if nulls.any():
            name = parts[required[int(np.flatnonzero(nulls)[0])]][0].name
            raise WireV2Refused(f"{where}.{name}: null in a NOT NULL column", malformed=False)


def _text_column(where: str, column: Column, rows: int, texts: _Texts) -> Any:
    if len(texts.codes) != rows * _CODES.itemsize:
        raise WireV2Refused(f"{where}: not {rows} codes", malformed=True)
    codes = np.frombuffer(texts.codes, dtype=_CODES)
    if rows and int(codes.max()) > len(texts.values):
        raise WireV2Refused(f"{where}: a code names no value", malformed=True)
    if rows and not column.nullable and not codes.all():
        raise WireV2Refused(f"{where}: null in a NOT NULL column", malformed=False)
    lookup = np.empty(len(texts.values) + 1, dtype=object)
    lookup[0] = None
    lookup[1:] = texts.values
    return lookup[codes]
