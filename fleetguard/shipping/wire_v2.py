"""The ingest wire format, version 2: the same batch as version 1 (`wire.py`), with the telemetry tables'
columns as arrays, so the controller reads them without a Python step per value (docs/controller.md).

One gzip-compressed msgpack map per batch:

    {"v": 2, "host": H, "boot_id": B, "seq": N, "sent_ts": T, "interval_seconds": F, "agent_version": V,
     "acks": [{"id": ..., "outcome": ..., "detail": ...}],
     "tables": {NAME: {"rows": R,
                       "numbers": {COLUMN: bytes},    # R little-endian values: float64 for DOUBLE and
                                                      # TIMESTAMP (NaN: NULL), int64 BIGINT, uint64 UBIGINT
                       "texts": {COLUMN: {"values": [str, ...], "codes": bytes}},  # R little-endian
                                                      # uint32: 0 is NULL, k is values[k - 1]
                       "columns": {COLUMN: [...]}}}}  # any other column, as version 1 sends it

Only the telemetry tables (`ARRAY_TABLES`, nearly every value a host sends) use "numbers" and "texts"; the
others (runtime records, findings, events: few rows, read as records by the controller's analysis) send
every column in "columns". An integer column holding a NULL, or a value its array type cannot hold, goes in
"columns" too, where the controller checks it exactly as in version 1.

An agent sends version 2 only to a controller that said it reads it (`"wire": [1, 2]`: in its reply to a
version-1 batch over HTTP, in its pool's advertisement over NATS, `wire_advert`): an older controller would
refuse the body as malformed, and the agent would drop it (over NATS, never even hear of it).
Encoded with the standard library only (`array`): the agent does not load numpy.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
import threading
import zlib
from array import array
from typing import Any

import msgspec

from fleetguard.shipping.wire import WIRE_VERSION, OutgoingBatch
from fleetguard.store.schema import TABLES

WIRE_VERSION_2 = 2
CONTENT_TYPE_V2 = "application/vnd.fleetguard.batch-v2+msgpack"
# The tables whose columns travel as arrays.
ARRAY_TABLES = frozenset({"gpu_samples", "nic_samples", "nic_counters"})
# The array type code of each column type that travels as numbers (little-endian, 8 bytes a value).
NUMBER_TYPECODES = {"DOUBLE": "d", "TIMESTAMP": "d", "BIGINT": "q", "UBIGINT": "Q"}
_FLOAT_TYPES = frozenset({"DOUBLE", "TIMESTAMP"})
_COLUMN_TYPES = {name: {c.name: c.sql_type for c in table.columns} for name, table in TABLES.items()}
_BIG_ENDIAN = sys.byteorder == "big"
_ENCODER = msgspec.msgpack.Encoder()
_NAN = math.nan
assert array("I").itemsize == 4, "texts' codes are 4-byte unsigned integers"


def encode_v2(batch: OutgoingBatch, level: int = 6) -> bytes:
    """The request body in version 2. A float that is not finite (NaN, infinity from a collector) is sent as
    NULL, as version 1's sender does after `encode` refuses it (`encode_v2_counted` also says how many)."""
    body, _ = encode_v2_counted(batch, level)
    return body


def encode_v2_counted(batch: OutgoingBatch, level: int = 6) -> tuple[bytes, int]:
    """`encode_v2`, and how many non-finite floats were sent as NULL."""
    non_finite = 0
    tables: dict[str, dict[str, Any]] = {}
    for name, columns in batch.tables.items():
        rows = len(next(iter(columns.values()))) if columns else 0
        if name not in ARRAY_TABLES:
            plain_columns: dict[str, list[Any]] = {}
            for column, values in columns.items():
                plain_columns[column], bad = _finite_or_none(values)
                non_finite += bad
            tables[name] = {"rows": rows, "columns": plain_columns}
            continue
        types = _COLUMN_TYPES[name]
        numbers: dict[str, bytes] = {}
        texts: dict[str, dict[str, Any]] = {}
        plain: dict[str, list[Any]] = {}
        for column, values in columns.items():
            sql_type = types.get(column)
            if sql_type == "VARCHAR" and all(type(v) is str or v is None for v in values):
                texts[column] = _coded(values)
            elif sql_type in _FLOAT_TYPES:
                packed, bad = _floats(values)
                if packed is None:
                    plain[column] = values
                else:
                    numbers[column] = packed
                    non_finite += bad
            elif sql_type in NUMBER_TYPECODES and (packed_int := _ints(NUMBER_TYPECODES[sql_type], values)):
                numbers[column] = packed_int
            else:
                plain[column], bad = _finite_or_none(values)
                non_finite += bad
        tables[name] = {"rows": rows, "numbers": numbers, "texts": texts, "columns": plain}
    doc = {**batch.to_json(), "v": WIRE_VERSION_2, "tables": tables}  # the head and acks as in version 1
    try:
        packed = _ENCODER.encode(doc)
    except (OverflowError, UnicodeEncodeError) as exc:
        raise NotInV2(f"a value version 2 cannot carry: {exc}") from None
    return gzip.compress(packed, compresslevel=level, mtime=0), non_finite


class NotInV2(ValueError):
    """A batch holding a value msgpack cannot carry (an integer past uint64, a lone surrogate): the agent
    sends it as version 1, whose controller refuses it naming the value, as for any agent before version 2."""


def _finite_or_none(values: list[Any]) -> tuple[list[Any], int]:
    """`values` with each non-finite float as NULL (version 1's sender does the same), and how many."""
    bad = sum(1 for v in values if type(v) is float and not math.isfinite(v))
    if not bad:
        return values, 0
    return [None if type(v) is float and not math.isfinite(v) else v for v in values], bad


def _floats(values: list[Any]) -> tuple[bytes | None, int]:
    """Little-endian float64s (NULL and any non-finite value: NaN); None if a value is not a number."""
    bad = 0
    out: list[float] = []
    for v in values:
        if v is None:
            out.append(_NAN)
        elif type(v) is float or type(v) is int:
            if type(v) is float and not math.isfinite(v):
                bad += 1
                out.append(_NAN)
            else:
                try:
                    out.append(float(v))
                except OverflowError:  # an int past a double's range: as values (refused there)
                    return None, 0
        else:  # a bool or anything else: as values, refused there as in version 1
            return None, 0
    packed = array("d", out)
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes(), bad


def _ints(typecode: str, values: list[Any]) -> bytes | None:
    """Little-endian 64-bit integers; None where they cannot travel so (a NULL, a bool, a value out of the
    type's range): those go as values, checked as in version 1."""
    if not all(type(v) is int for v in values):
        return None
    try:
        packed = array(typecode, values)
    except OverflowError:
        return None
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _coded(values: list[str | None]) -> dict[str, Any]:
    codes: dict[str | None, int] = {None: 0}
    packed = array("I", [codes.setdefault(v, len(codes)) for v in values])
    if _BIG_ENDIAN:
        packed.byteswap()
    return {"values": [v for v in codes if v is not None], "codes": packed.tobytes()}


def is_v2(body: bytes, compressed: bool = True) -> bool:
    """Whether a body is version 2 (a msgpack map) rather than version 1 (a JSON object), from its first
    byte: inflating that one byte costs next to nothing. False for anything that is neither (the caller's
    version-1 reading says why it is refused)."""
    if compressed:
        try:
            first = zlib.decompressobj(wbits=31).decompress(body, 1)
        except zlib.error:
            return False
    else:
        first = body[:1]
    return bool(first) and (0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF))


class WireChoice:
    """The wire version an agent encodes its new batches in: 1 until the controller says it reads 2 (its
    HTTP reply, or its NATS advertisement), and 1 again if a controller refuses a version-2 body (one
    downgraded to a version before it) or, over NATS, no longer says so."""

    def __init__(self) -> None:
        self._version = WIRE_VERSION
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return self._version

    def controller_reads(self, versions: object) -> None:
        """What a controller said it reads (its "wire" list; absent in replies before version 2, None when
        no NATS advertisement was found)."""
        with self._lock:
            reads_v2 = isinstance(versions, list) and WIRE_VERSION_2 in versions
            self._version = WIRE_VERSION_2 if reads_v2 else WIRE_VERSION

    def refused_v2(self) -> None:
        with self._lock:
            self._version = WIRE_VERSION


def to_v1(body: bytes) -> bytes:
    """A version-2 body (this agent's own, from its spool) as version 1, for a controller that reads only
    that: the same batch, each NULL a null again. ValueError if it is not a version-2 body."""
    try:
        doc = msgspec.msgpack.decode(zlib.decompress(body, wbits=31))
    except (msgspec.DecodeError, zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a version-2 body: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != WIRE_VERSION_2 or not isinstance(doc.get("tables"), dict):
        raise ValueError("not a version-2 body")
    try:
        tables = _v1_tables(doc["tables"])
    except (KeyError, TypeError, IndexError, AttributeError, OverflowError) as exc:  # a damaged spool record
        raise ValueError(f"not a version-2 batch: {exc!r}"[:200]) from None
    doc["v"], doc["tables"] = WIRE_VERSION, tables
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def _v1_tables(v2_tables: dict[str, Any]) -> dict[str, dict[str, list[Any]]]:
    tables: dict[str, dict[str, list[Any]]] = {}
    for name, table in v2_tables.items():
        columns: dict[str, list[Any]] = dict(table.get("columns") or {})
        types = _COLUMN_TYPES.get(name, {})
        for column, raw in (table.get("numbers") or {}).items():
            columns[column] = _unpacked(NUMBER_TYPECODES[types[column]], raw)
        for column, texts in (table.get("texts") or {}).items():
            values = [None, *texts["values"]]
            columns[column] = [values[code] for code in _unpacked("I", texts["codes"])]
        tables[name] = columns
    return tables


def _unpacked(typecode: str, raw: bytes) -> list[Any]:
    values = array(typecode)
    values.frombytes(raw)
    if _BIG_ENDIAN:
        values.byteswap()
    if typecode == "d":
        return [None if v != v else v for v in values]  # NaN: NULL
    return values.tolist()
