"""Wire v1 as a typed schema: a batch decoded in one pass by msgspec, each value's JSON type checked against
its store column in C while it is parsed, so the edge spends Python time per column, not per value.

The schema is built from the store's tables (`fleetguard.store.schema.TABLES`): a BIGINT column is a list of
JSON integers (never a bool or a float), a DOUBLE column a list of finite numbers, a VARCHAR column a list of
valid Unicode strings of at most MAX_TEXT_CHARS characters, NULL only where the column allows it; unknown
keys, tables and columns are refused. What a type cannot say (BIGINT's and UBIGINT's upper bounds, a time no
later than the controller's clock allows, one length per table, whose host a row names) the edge
(`validate.check_batch`) still checks per column. A body this schema refuses is not answered from here: the
edge parses it again with the standard library, whose checks name the reason (400 malformed or invalid
value) exactly as before.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from fleetguard.records.bounds import INT32_MAX, INT32_MIN
from fleetguard.store.schema import TABLES, Column, Table

# The limits are validate's (imported there from here, so the two readings of a batch cannot drift apart).
MAX_TEXT_CHARS = 64 * 1024  # any VARCHAR value (evidence_json is the longest)
# Epoch seconds a record may carry: from 2000 to 2200. Outside, a clock is broken or a value is forged.
MIN_TS, MAX_TS = 946_684_800.0, 7_258_118_400.0

# msgspec takes bounds that fit an int64 only: BIGINT's and UBIGINT's upper bounds are checked after decoding.
_VALUE_TYPES: dict[str, Any] = {
    "BIGINT": int,
    "UBIGINT": Annotated[int, Meta(ge=0)],
    "INTEGER": Annotated[int, Meta(ge=INT32_MIN, le=INT32_MAX)],
    # JSON has no NaN and a number past a double's range is refused ("out of range"); msgpack (wire version
    # 2's "columns") has NaN and infinities: the bounds refuse them (NaN is neither >= nor <= anything)
    "DOUBLE": Annotated[float, Meta(ge=-sys.float_info.max, le=sys.float_info.max)],
    "TIMESTAMP": Annotated[float, Meta(ge=MIN_TS, le=MAX_TS)],
    "VARCHAR": Annotated[str, Meta(max_length=MAX_TEXT_CHARS)],
    "BOOLEAN": bool,
}


def _column_type(column: Column) -> Any:
    # A column type the wire cannot carry holds nulls only (the edge refused any other value before).
    value = _VALUE_TYPES.get(column.sql_type, type(None))
    return list[value | None] if column.nullable else list[value]  # type: ignore[valid-type]


def _table_struct(table: Table, *, every_optional: bool = False) -> Any:
    """A table's columns as a struct of typed lists; `every_optional`: none required (wire version 2, where a
    required column may travel as an array instead: whether each is there is checked after decoding)."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for column in table.columns:
        if column.required and not every_optional:
            fields.append((column.name, _column_type(column)))
        else:  # absent: the record's default; an explicit null is refused, as before
            fields.append((column.name, _column_type(column) | UnsetType, UNSET))
    prefix = "WireColumnsV2" if every_optional else "WireColumns"
    return msgspec.defstruct(
        f"{prefix}_{table.name}", fields, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
    )


def optional_columns_struct(table: Table) -> Any:
    """`table`'s typed column lists with every column optional (wire version 2's "columns")."""
    return _table_struct(table, every_optional=True)


def present_columns(columns: Any) -> dict[str, list[Any]]:
    """The columns a decoded column struct holds."""
    return {
        field: values
        for field in columns.__struct_fields__
        if (values := getattr(columns, field)) is not UNSET
    }


_TABLE_STRUCTS = {name: _table_struct(table) for name, table in TABLES.items()}

# A batch's fields beside its tables and acks, each with its type: both wire versions' (wire_v2_schema too).
HEAD_FIELDS: tuple[tuple[str, type], ...] = (
    ("v", int),
    ("host", str),
    ("boot_id", str),
    ("seq", int),
    ("sent_ts", float),
    ("interval_seconds", float),
    ("agent_version", str),
)


def batch_struct(prefix: str, table_structs: dict[str, Any]) -> Any:
    """A batch's typed struct: HEAD_FIELDS, a table struct per table name (each optional), and the acks
    (each checked by shipping.commands.ack_from_json); no unknown key anywhere."""
    tables = msgspec.defstruct(
        f"{prefix}Tables",
        [(name, struct | UnsetType, UNSET) for name, struct in table_structs.items()],
        kw_only=True,
        forbid_unknown_fields=True,
    )
    return msgspec.defstruct(
        f"{prefix}Batch",
        [*HEAD_FIELDS, ("tables", tables), ("acks", list[dict[str, str]])],
        forbid_unknown_fields=True,
    )


def batch_document(batch: Any, tables: dict[str, Any]) -> dict[str, Any]:
    """A decoded batch struct as the document `validate.check_batch` takes, with `tables` as read."""
    doc = {name: getattr(batch, name) for name, _ in HEAD_FIELDS}
    doc["tables"], doc["acks"] = tables, batch.acks
    return doc


_Batch = batch_struct("Wire", _TABLE_STRUCTS)
_DECODER = msgspec.json.Decoder(_Batch)


def decode(raw: bytes) -> dict[str, Any] | None:
    """`raw` as the dict `json.loads` would give, if every value has its column's type; None if not (the
    caller reads it again to say why: a refusal here names a JSON path, not the store's reason)."""
    try:
        batch = _DECODER.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # msgspec.ValidationError is a DecodeError
        return None
    tables: dict[str, dict[str, list[Any]]] = {}
    for name in _TABLE_STRUCTS:
        columns = getattr(batch.tables, name)
        if columns is not UNSET:
            tables[name] = present_columns(columns)
    return batch_document(batch, tables)
