"""The ingest edge: a request body -> a checked batch, or a refusal naming the reason and the field.

Every value is checked against the column it lands in (fleetguard.records.bounds ranges) here, so the writer
never sees a value its table cannot hold and one bad batch never fails the group it is committed with. A body
is first decoded by the typed schema of `wire_schema` (each value's type checked in C as it is parsed; what
is left is a min and a max per integer and time column); a body that schema refuses is parsed again by the
standard library and checked a column at a time with C-speed builtins (set(map(type, ...)), min, max), which
name the reason and the field.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from diagnosis.rules_events import reserved_host_name
from fleetguard.controller import wire_schema
from fleetguard.controller.wire_schema import MAX_TEXT_CHARS, MAX_TS, MIN_TS
from fleetguard.controller.wire_v2_schema import WireV2Refused, decode_v2, decode_v2_plain
from fleetguard.httpserve import holds_lone_surrogate
from fleetguard.records.bounds import INT64_MAX, INT64_MIN, UINT64_MAX
from fleetguard.records.findings import CONTROLLER_FINDING_KINDS, FLEET_COPY_PREFIX
from fleetguard.shipping.commands import CommandAck, ack_from_json
from fleetguard.shipping.wire import WIRE_VERSION
from fleetguard.shipping.wire_v2 import WIRE_VERSION_2, is_v2
from fleetguard.store.schema import TABLES, Column, Table

# A real batch inflates to ~40 KB (one flush of an 8-GPU host); the first after a start to ~200 KB. Parsed
# JSON takes ~20x its text in memory, so this also bounds what one request can allocate.
MAX_DECOMPRESSED_BYTES = 16 << 20
MAX_ROWS = 1_000_000  # per batch, all tables
MAX_ACKS = 1000
MAX_ID_CHARS = 256  # host, boot_id, agent_version
# The wire versions parse_batch reads: the HTTP answer's "wire" list, and what NATS consumers advertise.
WIRE_VERSIONS = (WIRE_VERSION, WIRE_VERSION_2)
# Ahead of the controller's clock a record may be (clock skew). A record from the far future would stay the
# newest of its kind for ever: an open finding no retention removes, a host's send time (its lag and its jobs'
# analysis clock) stuck in the future, rollup buckets no one will close.
MAX_FUTURE_SECONDS = 3600.0


class Refusal(StrEnum):
    """Why a batch was refused; the label of the controller's refused-batches counter."""

    UNAUTHENTICATED = "unauthenticated"  # 401
    WRONG_HOST = "wrong_host"  # 403: the token belongs to another host
    TOO_LARGE = "too_large"  # 413
    MALFORMED = "malformed"  # 400: not gzip / not JSON / wrong shape
    INVALID_VALUE = "invalid_value"  # 400: a value its column cannot hold
    BUSY = "busy"  # 429: this host already has batches in flight
    OVERLOADED = "overloaded"  # 503: the writer is behind
    STORE_FAILED = "store_failed"  # 503: the store cannot be written
    # 503: the store refused this host's journaled batches (set aside) MAX_SET_ASIDE_PER_HOST times; its
    # batches wait in its spool until an operator has looked at them
    HELD = "held"


STATUS = {
    Refusal.UNAUTHENTICATED: 401,
    Refusal.WRONG_HOST: 403,
    Refusal.TOO_LARGE: 413,
    Refusal.MALFORMED: 400,
    Refusal.INVALID_VALUE: 400,
    Refusal.BUSY: 429,
    Refusal.OVERLOADED: 503,
    Refusal.STORE_FAILED: 503,
    Refusal.HELD: 503,
}


class BatchRefused(Exception):
    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @property
    def status(self) -> int:
        return STATUS[self.reason]


@dataclass
class IngestBatch:
    """A batch that passed every check: ready for the writer."""

    host: str
    boot_id: str
    seq: int
    sent_ts: float
    interval_seconds: float
    agent_version: str
    # Column name -> values: lists, or (from edge processes, edge_wire) numpy arrays for number columns.
    tables: dict[str, dict[str, Any]]
    acks: list[CommandAck] = field(default_factory=list)
    rows: int = 0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.host, self.boot_id, self.seq)


def decompress(body: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """gunzip `body`, refusing more than `limit` bytes of output (without producing them)."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, limit)
    except zlib.error as exc:
        raise BatchRefused(Refusal.MALFORMED, f"body is not gzip: {exc}") from exc
    if inflater.unconsumed_tail:
        raise BatchRefused(Refusal.TOO_LARGE, f"body inflates past {limit} bytes")
    if not inflater.eof or inflater.unused_data:
        raise BatchRefused(Refusal.MALFORMED, "body is not one complete gzip stream")
    return out


def parse_batch(
    body: bytes, authenticated_host: str, *, compressed: bool = True, now: float | None = None
) -> IngestBatch:
    """Check a request body from `authenticated_host` (the host its token names); with `now` (the
    controller's clock), no time may be more than MAX_FUTURE_SECONDS ahead of it."""
    raw = decompress(body) if compressed else body
    if is_v2(raw, compressed=False):
        return _parse_v2(raw, authenticated_host, now)
    typed = wire_schema.decode(raw)
    if typed is not None:
        # Every value has its column's type and is valid Unicode (no lone surrogate anywhere).
        return check_batch(typed, authenticated_host, now=now, typed=True)
    return parse_json_batch(raw, authenticated_host, now=now)


def _parse_v2(raw: bytes, authenticated_host: str, now: float | None) -> IngestBatch:
    """A wire-version-2 body: typed where every value has its type, else read again untyped and checked
    value by value, as version 1's slow reading is (so a refusal names version 1's reason)."""
    try:
        doc = decode_v2(raw)
        typed = doc is not None
        if doc is None:
            doc = decode_v2_plain(raw)
    except WireV2Refused as exc:
        raise BatchRefused(Refusal.MALFORMED if exc.malformed else Refusal.INVALID_VALUE, str(exc)) from None
    return check_batch(doc, authenticated_host, now=now, typed=typed, version=WIRE_VERSION_2)


def parse_json_batch(raw: bytes, authenticated_host: str, *, now: float | None = None) -> IngestBatch:
    """The reading of a body the typed schema refused (or any body: its verdict is the contract that
    `parse_batch` keeps): the standard library's JSON, then every check, which name the refusal."""
    # No separate nesting pre-scan: the C decoder turns absurd nesting into RecursionError, and check_batch
    # refuses anything but scalars in a column, so a nested value never gets further than this.
    try:
        doc = json.loads(raw)
    except RecursionError as exc:
        raise BatchRefused(Refusal.MALFORMED, "body nests too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BatchRefused(Refusal.MALFORMED, f"body is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BatchRefused(Refusal.MALFORMED, "batch: expected a JSON object")
    checked = check_batch(doc, authenticated_host, now=now)
    # The columns refuse a lone surrogate themselves; this catches one anywhere else the batch is stored.
    if holds_lone_surrogate(raw, doc):
        raise BatchRefused(Refusal.MALFORMED, "batch: a \\u escape names a lone UTF-16 surrogate")
    return checked


_FORMATS = {WIRE_VERSION: "JSON", WIRE_VERSION_2: "msgpack"}
_KEYS = {"v", "host", "boot_id", "seq", "sent_ts", "interval_seconds", "agent_version", "tables", "acks"}


def check_batch(
    doc: dict[str, Any],
    authenticated_host: str,
    *,
    now: float | None = None,
    typed: bool = False,
    version: int = WIRE_VERSION,
) -> IngestBatch:
    """Check a decoded batch; `typed`: decoded by `wire_schema` (or `wire_v2_schema`, `version` 2), whose
    types need no second look."""
    unknown = set(doc) - _KEYS
    if unknown or set(doc) != _KEYS:
        detail = (
            f"unknown keys {sorted(unknown)[:5]}" if unknown else f"missing keys {sorted(_KEYS - set(doc))}"
        )
        raise BatchRefused(Refusal.MALFORMED, f"batch: {detail}")
    if doc["v"] != version or type(doc["v"]) is not int:
        raise BatchRefused(Refusal.MALFORMED, f"batch.v: a {_FORMATS[version]} body is version {version}")
    host = _short_text("host", doc["host"])
    if host != authenticated_host:
        raise BatchRefused(Refusal.WRONG_HOST, f"batch.host {host[:64]!r} is not the host of this token")
    reserved = reserved_host_name(host)
    if reserved is not None:  # a token made before names were reserved, or a file edited by hand
        raise BatchRefused(Refusal.WRONG_HOST, reserved)
    seq = doc["seq"]
    max_ts = MAX_TS if now is None else min(MAX_TS, now + MAX_FUTURE_SECONDS)
    if type(seq) is not int or not 1 <= seq <= INT64_MAX:
        raise BatchRefused(Refusal.INVALID_VALUE, "batch.seq: expected an integer from 1 to 2**63-1")
    batch = IngestBatch(
        host=host,
        boot_id=_short_text("boot_id", doc["boot_id"]),
        seq=seq,
        sent_ts=_timestamp("sent_ts", doc["sent_ts"], max_ts),
        interval_seconds=_interval(doc["interval_seconds"]),
        agent_version=_short_text("agent_version", doc["agent_version"]),
        tables={},
        acks=_acks(doc["acks"]),
    )
    tables = doc["tables"]
    if not isinstance(tables, dict):
        raise BatchRefused(Refusal.MALFORMED, "batch.tables: expected an object")
    for name, columns in tables.items():
        table = TABLES.get(name)
        if table is None:
            raise BatchRefused(Refusal.MALFORMED, f"batch.tables: unknown table {str(name)[:64]!r}")
        rows = check_columns(table, columns, host, max_ts, typed=typed)
        if rows:
            batch.tables[name] = columns
            batch.rows += rows
        if batch.rows > MAX_ROWS:
            raise BatchRefused(Refusal.TOO_LARGE, f"batch: more than {MAX_ROWS} rows")
    return batch


def _short_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS or not value.isprintable():
        raise BatchRefused(Refusal.MALFORMED, f"batch.{name}: expected 1-{MAX_ID_CHARS} printable characters")
    return value


def _timestamp(name: str, value: object, max_ts: float = MAX_TS) -> float:
    # a plain int or float: not a bool, nor a subclass with its own comparisons
    if not ((type(value) is int or type(value) is float) and MIN_TS <= value <= max_ts):
        raise BatchRefused(
            Refusal.INVALID_VALUE, f"batch.{name}: expected epoch seconds from 2000 to an hour from now"
        )
    return float(value)


def _interval(value: object) -> float:
    if not ((type(value) is int or type(value) is float) and 0.01 <= value <= 86400):
        raise BatchRefused(Refusal.INVALID_VALUE, "batch.interval_seconds: expected 0.01 to 86400")
    return float(value)


def _acks(value: object) -> list[CommandAck]:
    if not isinstance(value, list) or len(value) > MAX_ACKS:
        raise BatchRefused(Refusal.MALFORMED, f"batch.acks: expected a list of at most {MAX_ACKS}")
    try:
        return [ack_from_json(a) for a in value]
    except ValueError as exc:
        raise BatchRefused(Refusal.MALFORMED, f"batch.{exc}") from exc


def check_columns(
    table: Table, columns: object, host: str, max_ts: float = MAX_TS, *, typed: bool = False
) -> int:
    """Check one table's columns in place; return its row count."""
    where = f"batch.tables.{table.name}"
    if not isinstance(columns, dict):
        raise BatchRefused(Refusal.MALFORMED, f"{where}: expected an object of columns")
    by_name = {c.name: c for c in table.columns}
    unknown = [str(n)[:64] for n in columns if n not in by_name]
    missing = [c.name for c in table.columns if c.required and c.name not in columns]
    if unknown or missing:
        raise BatchRefused(Refusal.MALFORMED, f"{where}: unknown columns {unknown}, missing {missing}")
    # lists, or (wire version 2) arrays: one-dimensional, made by wire_v2_schema
    lengths = {len(v) if isinstance(v, list | np.ndarray) else -1 for v in columns.values()}
    if len(lengths) != 1 or -1 in lengths:
        raise BatchRefused(Refusal.MALFORMED, f"{where}: columns must be lists of one length")
    if typed:  # only the types whose bounds a typed decoder leaves open: a call per column was most of it
        for column in _TYPED_CHECKED[table.name]:
            values = columns.get(column.name)
            if values is not None:
                _check_typed_column(column, values, f"{where}.{column.name}", max_ts)
    else:
        for name, values in columns.items():
            _check_column(by_name[name], values, f"{where}.{name}", max_ts)
    rows = lengths.pop()
    if table.name == "findings":
        _check_agent_findings(columns, host, rows, where)
    elif table.name == "actions":
        # Which agent took an action is the batch's host (its token's), not something the row may leave open.
        columns["host"] = [host if h is None else h for h in columns.get("host", [None] * rows)]
    if "host" in columns and not set(columns["host"]) <= {host, None}:  # a set: built in C, no step per row
        # The batch's own host was checked against the token (403); a row naming another host is content
        # that sending again cannot fix: 400, and the agent sets the batch aside.
        raise BatchRefused(Refusal.INVALID_VALUE, f"{where}.host: a row names another host than the batch")
    return rows


# Ids only the controller makes: its copies of agents' findings, its own kinds' ids (records.findings
# .finding_id) and the ids those kinds had before that scheme (a forged one would still match an old row).
CONTROLLER_FINDING_PREFIXES = (
    FLEET_COPY_PREFIX,
    *(f"{k.value}/" for k in sorted(CONTROLLER_FINDING_KINDS)),
    *(f"{k.value}:" for k in sorted(CONTROLLER_FINDING_KINDS)),
)


def _check_agent_findings(columns: dict[str, Any], host: str, rows: int, where: str) -> None:
    """An agent's findings are about its own host: one that names none is given the batch's."""
    columns["host"] = [host if h is None else h for h in columns.get("host", [None] * rows)]
    if any(k in CONTROLLER_FINDING_KINDS for k in columns["kind"]) or any(
        i.startswith(CONTROLLER_FINDING_PREFIXES) for i in columns["finding_id"]
    ):
        raise BatchRefused(Refusal.INVALID_VALUE, f"{where}: findings only the controller makes")


def _check_column(column: Column, values: Sequence[Any], where: str, max_ts: float = MAX_TS) -> None:
    types = set(map(type, values))
    if type(None) in types:
        if not column.nullable:
            raise BatchRefused(Refusal.INVALID_VALUE, f"{where}: null in a NOT NULL column")
        types.discard(type(None))
        values = [v for v in values if v is not None]
    if not values:
        return
    checker = _CHECKS.get(column.sql_type)
    if checker is None:
        raise BatchRefused(Refusal.MALFORMED, f"{where}: column type {column.sql_type} cannot be shipped")
    problem = _timestamps(types, values, max_ts) if checker is _timestamps else checker(types, values)
    if problem:
        raise BatchRefused(Refusal.INVALID_VALUE, f"{where}: {problem}")


def _check_typed_column(column: Column, values: list[Any], where: str, max_ts: float = MAX_TS) -> None:
    """What a `wire_schema` type leaves open: the upper bounds of BIGINT and UBIGINT (and BIGINT's lower one),
    and a time no later than the controller's clock allows."""
    bounds = _TYPED_BOUNDS.get(column.sql_type)
    if bounds is None or not len(values):
        return
    if isinstance(values, np.ndarray):  # wire version 2: int64 and uint64 arrays hold nothing out of range
        if column.is_timestamp:
            _check_times(values, where, max_ts)
        return
    low, high = bounds
    try:
        lowest, highest = min(values), max(values)
    except TypeError:  # NULLs among the values (the schema allowed them: the column is nullable)
        lowest = highest = None
    if lowest is None or highest is None:  # min() of one value compares nothing: [None] passes it
        present = [v for v in values if v is not None]
        if not present:
            return
        lowest, highest = min(present), max(present)
    if column.is_timestamp:
        high = max_ts
    if lowest < low or highest > high:
        problem = (
            "timestamp before 2000 or more than an hour ahead of the controller's clock"
            if column.is_timestamp
            else f"integer out of range {low}..{high}"
        )
        raise BatchRefused(Refusal.INVALID_VALUE, f"{where}: {problem}")


def _check_times(values: Any, where: str, max_ts: float) -> None:
    """A wire-version-2 time column (`wire_v2_schema` checked its type, NULLs and infinities): its range."""
    lowest, highest = np.fmin.reduce(values), np.fmax.reduce(values)  # NaN (NULL) left out; all NaN: NaN
    if lowest < MIN_TS or highest > max_ts:
        raise BatchRefused(
            Refusal.INVALID_VALUE,
            f"{where}: timestamp before 2000 or more than an hour ahead of the controller's clock",
        )


_TYPED_BOUNDS: dict[str, tuple[float, float]] = {
    "BIGINT": (INT64_MIN, INT64_MAX),
    "UBIGINT": (0, UINT64_MAX),
    "TIMESTAMP": (MIN_TS, MAX_TS),
}


# Per table, the columns `_check_typed_column` has something to check in.
_TYPED_CHECKED = {
    name: [c for c in table.columns if c.sql_type in _TYPED_BOUNDS] for name, table in TABLES.items()
}


def _ints(low: int, high: int) -> Any:
    def check(types: set[type], values: Sequence[Any]) -> str:
        if types != {int}:  # bool is its own type here, so True is not taken for 1
            return f"expected integers, got {sorted(t.__name__ for t in types)}"
        if min(values) < low or max(values) > high:
            return f"integer out of range {low}..{high}"
        return ""

    return check


def _doubles(types: set[type], values: Sequence[Any]) -> str:
    if not types <= {int, float}:
        return f"expected numbers, got {sorted(t.__name__ for t in types)}"
    try:
        if not all(map(math.isfinite, values)):
            return "non-finite number"
    except OverflowError:
        return "number out of range"
    return ""


def _timestamps(types: set[type], values: Sequence[Any], max_ts: float = MAX_TS) -> str:
    problem = _doubles(types, values)
    if not problem and (min(values) < MIN_TS or max(values) > max_ts):
        problem = "timestamp before 2000 or more than an hour ahead of the controller's clock"
    return problem


def _texts(types: set[type], values: Sequence[Any]) -> str:
    if types != {str}:
        return f"expected strings, got {sorted(t.__name__ for t in types)}"
    if max(map(len, values)) > MAX_TEXT_CHARS:
        return f"string longer than {MAX_TEXT_CHARS} characters"
    try:
        "".join(values).encode()  # a lone surrogate (JSON allows "\ud800") is not UTF-8: DuckDB refuses it
    except UnicodeEncodeError:
        return "string that is not valid Unicode"
    return ""


def _booleans(types: set[type], values: Sequence[Any]) -> str:
    return "" if types == {bool} else f"expected true/false, got {sorted(t.__name__ for t in types)}"


_CHECKS = {
    "BIGINT": _ints(INT64_MIN, INT64_MAX),
    "UBIGINT": _ints(0, UINT64_MAX),
    "INTEGER": _ints(-(2**31), 2**31 - 1),
    "DOUBLE": _doubles,
    "TIMESTAMP": _timestamps,
    "VARCHAR": _texts,
    "BOOLEAN": _booleans,
}
