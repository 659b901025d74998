"""Wire version 2 (`fleetguard.shipping.wire_v2`) read into the columns a checked batch holds: the telemetry
tables' number columns as numpy arrays over the body's own bytes, their text columns as object arrays built
by one index into the distinct values, every other column as version 1's typed lists.

Every type is checked while the body is decoded (msgspec, in C) or by a few numpy calls per table, never by
a Python step per value: an array's length against its table's row count, a number column's array type
against its store column's (float64 for DOUBLE and TIMESTAMP, int64 BIGINT, uint64 UBIGINT: every value of
those types fits its column), no infinity, NULL (NaN, code 0) only where the column takes it, each code
naming one of the values sent. What is left is what version 1's typed batches leave to
`validate.check_batch` too: the times' range, whose host a row names, the findings' kinds. A refusal names
the same reason (400 malformed, or invalid value) as version 1's for the same fault: a body whose lists (or
fields) the typed schema refuses is read again untyped (`decode_v2_plain`), its arrays as lists, and checked
value by value as version 1's slow reading is (a NaN in a list is refused there too: msgpack, unlike JSON,
carries one). A text column's distinct values are no more than its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import UNSET, Meta, UnsetType

from fleetguard.controller.wire_schema import (
    MAX_TEXT_CHARS,
    batch_document,
    batch_struct,
    optional_columns_struct,
    present_columns,
)
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
# Values a numpy call looks at in one piece: numpy lets go of the interpreter lock for a loop past 500.
_UNDER_THE_LOCK = 480


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
_Batch = batch_struct("WireV2", _TABLE_STRUCTS)
_DECODER = msgspec.msgpack.Decoder(_Batch)
_COLUMNS = {name: {c.name: c for c in table.columns} for name, table in TABLES.items()}


def decode_v2(raw: bytes) -> dict[str, Any] | None:
    """An inflated version-2 body as the document `validate.check_batch` takes (typed: lists and arrays);
    WireV2Refused naming what is wrong; None if a value in "columns" (or a field of the batch) does not
    have its type: `decode_v2_plain` reads it again so the refusal names version 1's reason."""
    try:
        batch = _DECODER.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # msgspec.ValidationError is a DecodeError
        return None
    if batch.v != WIRE_VERSION_2:
        raise WireV2Refused("batch.v: a msgpack body is version 2", malformed=True)
    tables: dict[str, dict[str, Any]] = {}
    for name in _TABLE_STRUCTS:
        table = getattr(batch.tables, name)
        if table is not UNSET:
            tables[name] = _table_columns(name, table)
    return batch_document(batch, tables)


def decode_v2_plain(raw: bytes) -> dict[str, Any]:
    """A version-2 body the typed schema refused, as version 1's document (every column a list, NULL None):
    `validate.check_batch` then checks it value by value and names the reason version 1 would for the same
    batch. Only the arrays' shape is checked here (WireV2Refused): values are the caller's to judge."""
    try:
        doc = msgspec.msgpack.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise WireV2Refused(f"batch: not a version-2 batch: {str(exc)[:200]}", malformed=True) from None
    if not isinstance(doc, dict) or not all(type(k) is str for k in doc):  # msgpack keys may be anything
        raise WireV2Refused("batch: expected a map of names", malformed=True)
    tables = doc.get("tables")
    if not isinstance(tables, dict):
        raise WireV2Refused("batch.tables: expected a map", malformed=True)
    plain: dict[Any, Any] = {}
    for name, table in tables.items():
        if name not in TABLES:
            raise WireV2Refused(f"batch.tables: unknown table {str(name)[:64]!r}", malformed=True)
        plain[name] = _plain_table(name, table)
    return {**doc, "tables": plain}


_TABLE_KEYS = frozenset({"rows", "numbers", "texts", "columns"})


def _plain_table(name: str, table: object) -> dict[str, Any]:
    where = f"batch.tables.{name}"
    if not isinstance(table, dict) or not set(table) <= _TABLE_KEYS or "rows" not in table:
        raise WireV2Refused(f"{where}: expected a map of rows, numbers, texts, columns", malformed=True)
    rows, numbers, texts = table["rows"], table.get("numbers", {}), table.get("texts", {})
    columns = table.get("columns", {})
    if type(rows) is not int or not 0 <= rows <= MAX_TABLE_ROWS:
        raise WireV2Refused(f"{where}.rows: expected 0 to {MAX_TABLE_ROWS}", malformed=True)
    if name not in ARRAY_TABLES and (numbers or texts):
        raise WireV2Refused(f"{where}: only {sorted(ARRAY_TABLES)} send numbers and texts", malformed=True)
    shapes_ok = (
        isinstance(numbers, dict)
        and isinstance(texts, dict)
        and isinstance(columns, dict)
        and all(type(k) is str for part in (numbers, texts, columns) for k in part)
        and all(type(v) is bytes for v in numbers.values())
        and all(type(v) is list for v in columns.values())
        and all(
            isinstance(t, dict)
            and set(t) == {"values", "codes"}
            and type(t["values"]) is list
            and all(type(v) is str for v in t["values"])
            and type(t["codes"]) is bytes
            for t in texts.values()
        )
    )
    if not shapes_ok:
        raise WireV2Refused(
            f"{where}: numbers are bytes, texts values and codes, columns lists", malformed=True
        )
    # The arrays' shape as the typed reading checks it (a text's length is version 1's to judge: not here).
    arrays = _array_columns(
        name, rows, {}, numbers, {k: _Texts(values=t["values"], codes=t["codes"]) for k, t in texts.items()}
    )
    out: dict[str, Any] = dict(columns)
    for column_name, values in arrays.items():
        if column_name in out:
            raise WireV2Refused(f"{where}.{column_name}: sent twice", malformed=True)
        listed = values.tolist()
        out[column_name] = [None if v != v else v for v in listed] if values.dtype.kind == "f" else listed
    return out


def _table_columns(name: str, table: Any) -> dict[str, Any]:
    columns: dict[str, Any] = {} if table.columns is UNSET else present_columns(table.columns)
    if name not in ARRAY_TABLES:
        return columns
    return _array_columns(name, table.rows, columns, table.numbers, table.texts, check_values=True)


def _array_columns(
    name: str,
    rows: int,
    columns: dict[str, Any],
    numbers: dict[str, bytes],
    texts: dict[str, _Texts],
    *,
    check_values: bool = False,
) -> dict[str, Any]:
    """`columns` with a table's "numbers" and "texts" added as arrays; `check_values`: their values checked
    too (infinities, NULLs), else only their shape (version 1's checks judge the values)."""
    where = f"batch.tables.{name}"
    if numbers:
        columns.update(_number_columns(where, name, rows, numbers, columns, check_values))
    by_name = _COLUMNS[name]
    text_parts: list[tuple[Column, _Texts]] = []
    for column_name, text in texts.items():
        column = by_name.get(column_name)
        if column is None or column.sql_type != "VARCHAR":
            raise WireV2Refused(f"{where}.texts: no text column {column_name[:64]!r}", malformed=True)
        if column_name in columns:
            raise WireV2Refused(f"{where}.{column_name}: sent twice", malformed=True)
        if len(text.codes) != rows * _CODES.itemsize:
            raise WireV2Refused(f"{where}.{column_name}: not {rows} codes", malformed=True)
        if len(text.values) > rows:  # distinct values: no more than the rows that name them
            raise WireV2Refused(f"{where}.{column_name}: more values than rows", malformed=True)
        text_parts.append((column, text))
    if text_parts:
        columns.update(_text_columns(where, rows, text_parts, check_values))
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
    where: str,
    table_name: str,
    rows: int,
    numbers: dict[str, bytes],
    columns: dict[str, Any],
    check_values: bool,
) -> dict[str, Any]:
    """A table's number columns as row views of one block of the body's bytes (every type is 8 bytes a
    value). No numpy loop runs over the whole block: numpy lets go of the interpreter lock for a loop past
    ~500 values, and taking it back beside the handler threads and the lanes cost the controller more
    (two thread switches a call, in the kernel) than the loop saved. So an infinity is looked for in
    pieces short enough to keep the lock (`_may_hold_infinity`), and only where one appears are the float
    columns looked at one by one."""
    names = tuple(numbers)
    layout = _number_layout(where, table_name, names)
    if not columns.keys().isdisjoint(names):
        twice = next(n for n in names if n in columns)
        raise WireV2Refused(f"{where}.{twice[:64]}: sent twice", malformed=True)
    size = rows * 8
    if set(map(len, numbers.values())) != {size}:  # in C: no Python step per column
        short = next(n for n, raw in numbers.items() if len(raw) != size)
        raise WireV2Refused(f"{where}.{short[:64]}: not {rows} values", malformed=True)
    blob = b"".join(numbers.values())
    block = np.frombuffer(blob, dtype=_FLOAT).reshape(len(names), rows)
    out: dict[str, Any] = {}
    if layout.float_rows:
        floats = list(map(block.__getitem__, layout.float_rows))  # views: no copy, no loop
        if check_values and rows and _may_hold_infinity(block.reshape(-1)):
            # (it may also be an integer column's bytes: the float columns are looked at exactly)
            for name, values in zip(layout.float_names, floats, strict=True):
                if np.isinf(values).any():
                    raise WireV2Refused(f"{where}.{name}: non-finite number", malformed=False)
        if check_values and rows:
            for i in layout.required_rows:
                if np.isnan(block[i]).any():
                    raise WireV2Refused(f"{where}.{names[i]}: null in a NOT NULL column", malformed=False)
        out.update(zip(layout.float_names, floats, strict=True))
    for dtype, group_rows, group_names in layout.int_groups:
        # (every int64 fits BIGINT and every uint64 UBIGINT: nothing to check)
        same_bytes = block.view(dtype)
        out.update(zip(group_names, map(same_bytes.__getitem__, group_rows), strict=True))
    return out


def _may_hold_infinity(values: np.ndarray[Any, Any]) -> bool:
    """Whether any of `values` is an infinity, read as float64, a piece at a time under the interpreter's
    lock. Searching the bytes for an infinity's 8 bytes cost 6x as much: number blocks are mostly zero
    bytes, the worst case for a search whose pattern is six zero bytes and two others."""
    for start in range(0, len(values), _UNDER_THE_LOCK):
        if np.isinf(values[start : start + _UNDER_THE_LOCK]).any():
            return True
    return False


def _text_columns(
    where: str, rows: int, parts: list[tuple[Column, _Texts]], check_values: bool
) -> dict[str, Any]:
    """A table's text columns as object arrays: each column's codes index its values (0 is NULL), and a
    code past them is numpy's IndexError. A column at a time, each call on one column's codes only (see
    `_number_columns` on why no loop runs over all of them at once)."""
    out: dict[str, Any] = {}
    for column, texts in parts:
        codes = np.frombuffer(texts.codes, dtype=_CODES)
        lookup = np.empty(len(texts.values) + 1, dtype=object)  # every slot None: lookup[0] is NULL
        lookup[1:] = texts.values
        try:
            strings = lookup[codes]
        except IndexError:
            raise WireV2Refused(f"{where}.{column.name}: a code names no value", malformed=True) from None
        if check_values and rows and not column.nullable and not codes.all():
            raise WireV2Refused(f"{where}.{column.name}: null in a NOT NULL column", malformed=False)
        out[column.name] = strings
    return out
