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

from dataclasses import dataclass
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
_FLOAT = np.dtype("<f8")


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
    if table.numbers:
        columns.update(_number_columns(where, name, rows, table.numbers, columns))
    text_parts: list[tuple[Column, _Texts]] = []
    for column_name, texts in table.texts.items():
        column = by_name.get(column_name)
        if column is None or column.sql_type != "VARCHAR":
            raise WireV2Refused(f"{where}.texts: no text column {column_name[:64]!r}", malformed=True)
        if column_name in columns:
            raise WireV2Refused(f"{where}.{column_name}: sent twice", malformed=True)
        if len(texts.codes) != rows * _CODES.itemsize:
            raise WireV2Refused(f"{where}.{column_name}: not {rows} codes", malformed=True)
        text_parts.append((column, texts))
    if text_parts:
        columns.update(_text_columns(where, rows, text_parts))
    return columns


@dataclass(frozen=True)
class _NumberLayout:
    """Where each of a list of number columns lands: agents send the same list batch after batch, so this is
    worked out once per list (`_number_layout`), and a batch's arrays are read with a few numpy calls."""

    float_rows: list[int]  # rows of the batch's block that are DOUBLE or TIMESTAMP columns
    float_names: list[str]
    required_rows: list[int]  # float rows whose column is NOT NULL (NaN there is a NULL it cannot take)
    int_groups: list[tuple[np.dtype[Any], list[int], list[str]]]  # int64 / uint64: the rows and names


_LAYOUTS: dict[tuple[str, tuple[str, ...]], _NumberLayout] = {}
MAX_LAYOUTS = 256  # bounded: a hostile agent may send a new list of names with every batch


def _number_layout(where: str, table_name: str, names: tuple[str, ...]) -> _NumberLayout:
    key = (table_name, names)
    layout = _LAYOUTS.get(key)
    if layout is not None:
        return layout
    by_name = _COLUMNS[table_name]
    float_rows: list[int] = []
    ints: dict[np.dtype[Any], tuple[list[int], list[str]]] = {}
    for i, column_name in enumerate(names):
        column = by_name.get(column_name)
        dtype = None if column is None else _DTYPES.get(column.sql_type)
        if dtype is None:
            raise WireV2Refused(f"{where}.numbers: no number column {column_name[:64]!r}", malformed=True)
        if dtype.kind == "f":
            float_rows.append(i)
        else:
            rows, group_names = ints.setdefault(dtype, ([], []))
            rows.append(i)
            group_names.append(column_name)
    layout = _NumberLayout(
        float_rows=float_rows,
        float_names=[names[i] for i in float_rows],
        required_rows=[i for i in float_rows if not by_name[names[i]].nullable],
        int_groups=[(dtype, rows, group_names) for dtype, (rows, group_names) in ints.items()],
    )
    if len(_LAYOUTS) >= MAX_LAYOUTS:
        _LAYOUTS.clear()
    _LAYOUTS[key] = layout
    return layout


def _number_columns(
    where: str, table_name: str, rows: int, numbers: dict[str, bytes], columns: dict[str, Any]
) -> dict[str, Any]:
    """A table's number columns as arrays over one block of the body's bytes (every type is 8 bytes a value),
    checked together: one call finds an infinity in any float column, one a NULL where none is taken."""
    names = tuple(numbers)
    layout = _number_layout(where, table_name, names)
    if not columns.keys().isdisjoint(names):
        twice = next(n for n in names if n in columns)
        raise WireV2Refused(f"{where}.{twice[:64]}: sent twice", malformed=True)
    size = rows * 8
    if set(map(len, numbers.values())) != {size}:  # in C: no Python step per column
        short = next(n for n, raw in numbers.items() if len(raw) != size)
        raise WireV2Refused(f"{where}.{short[:64]}: not {rows} values", malformed=True)
    block = np.frombuffer(b"".join(numbers.values()), dtype=_FLOAT).reshape(len(names), rows)
    out: dict[str, Any] = {}
    if layout.float_rows:
        floats = block[layout.float_rows]
        if rows and np.isinf(floats).any():
            first = int(np.flatnonzero(np.isinf(floats).any(axis=1))[0])
            raise WireV2Refused(f"{where}.{layout.float_names[first]}: non-finite number", malformed=False)
        if rows and layout.required_rows:
            nulls = np.isnan(block[layout.required_rows]).any(axis=1)
            if nulls.any():
                name = names[layout.required_rows[int(np.flatnonzero(nulls)[0])]]
                raise WireV2Refused(f"{where}.{name}: null in a NOT NULL column", malformed=False)
        out.update(zip(layout.float_names, floats, strict=True))
    for dtype, group_rows, group_names in layout.int_groups:
        # (every int64 fits BIGINT and every uint64 UBIGINT: nothing to check)
        out.update(zip(group_names, block[group_rows].view(dtype), strict=True))
    return out


def _text_columns(where: str, rows: int, parts: list[tuple[Column, _Texts]]) -> dict[str, Any]:
    """A table's text columns as object arrays, read together: their codes as the rows of one array, checked
    against their own values' counts in one comparison, then turned into strings by one index into all their
    values (each column's codes shifted past the columns before it; 0 stays NULL)."""
    codes = np.frombuffer(b"".join(t.codes for _, t in parts), dtype=_CODES).reshape(len(parts), rows)
    counts = np.array([len(t.values) for _, t in parts], dtype=np.int64)
    if rows:
        over = codes.max(axis=1) > counts
        if over.any():
            name = parts[int(np.flatnonzero(over)[0])][0].name
            raise WireV2Refused(f"{where}.{name}: a code names no value", malformed=True)
        required = [i for i, (column, _) in enumerate(parts) if not column.nullable]
        if required:
            nulls = (codes[required] == 0).any(axis=1)
            if nulls.any():
                name = parts[required[int(np.flatnonzero(nulls)[0])]][0].name
                raise WireV2Refused(f"{where}.{name}: null in a NOT NULL column", malformed=False)
    values: list[str | None] = [None]
    for _, texts in parts:
        values += texts.values
    lookup = np.empty(len(values), dtype=object)
    lookup[:] = values
    offsets = np.cumsum(counts) - counts  # where each column's values start after the NULL
    shifted = np.where(codes == 0, 0, codes.astype(np.int64) + offsets[:, None])
    strings = lookup[shifted]
    return {column.name: strings[i] for i, (column, _) in enumerate(parts)}
