"""What the controller and its edge processes (`edge_pool`) say to each other: a request body to check, and a
checked batch or a refusal back, each one length-prefixed msgpack frame on a Unix socket pair.

Nothing here is pickle: the controller reads an edge process's answer with a typed msgspec decoder, so a
worker that a hostile body had somehow subverted could still only hand back values of the types a checked
batch holds (str, int, float, bool, None in columns; the ack fields), never choose a class to build. The
worker's checks (`validate.parse_batch`) are the contract; this module only carries their result.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec
import numpy as np

from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal
from fleetguard.shipping.commands import CommandAck, CommandOutcome
from fleetguard.store.schema import TABLES, Column

# A checked batch is at most MAX_DECOMPRESSED_BYTES (16 MiB) of JSON; msgpack of the same values is no
# larger than its JSON text plus a few bytes per string. A frame past this is a worker gone wrong.
MAX_FRAME_BYTES = 40 << 20
HEADER = struct.Struct("!I")

# The telemetry tables, most of every batch's values: their number columns travel as the bytes of the numpy
# array the writer scans (columns.as_array), so the controller makes no Python object per value, and joins a
# group's columns with one np.concatenate. Other tables (runtime records, findings: few rows, read as records
# by the analysis) travel as values.
BUFFER_TABLES = frozenset({"gpu_samples", "nic_samples", "nic_counters"})
# The array type of each column type, chosen here from the schema, never named by the worker. A NULL in a
# float or time column is NaN (the writer's scan reads it as NULL, as it does for the values path); an integer
# or boolean column holding a NULL travels as values.
_BUFFER_DTYPES: dict[str, Any] = {
    "DOUBLE": np.dtype(np.float64),
    "TIMESTAMP": np.dtype(np.float64),  # epoch seconds, as checked; the writer converts to microseconds
    "BIGINT": np.dtype(np.int64),
    "UBIGINT": np.dtype(np.uint64),
    "BOOLEAN": np.dtype(np.bool_),
}
_COLUMNS = {name: {c.name: c for c in table.columns} for name, table in TABLES.items()}


class EdgeRequest(msgspec.Struct, array_like=True):
    host: str  # the host the request's token names
    compressed: bool
    now: float  # the controller's clock: no time may be more than an hour ahead of it
    body: bytes


class WireAck(msgspec.Struct, array_like=True):
    command_id: str
    outcome: str
    detail: str


class EdgeReply(msgspec.Struct, array_like=True):
    """A checked batch (`refusal` empty) or why it was refused (`refusal` a Refusal value, `message`)."""

    refusal: str = ""
    message: str = ""
    host: str = ""
    boot_id: str = ""
    seq: int = 0
    sent_ts: float = 0.0
    interval_seconds: float = 0.0
    agent_version: str = ""
    tables: dict[str, dict[str, list[Any]]] = {}
    buffers: dict[str, dict[str, bytes]] = {}  # BUFFER_TABLES' number columns, as array bytes
    acks: list[WireAck] = []
    rows: int = 0


INTERNAL = "internal"  # the worker's checks raised something other than a refusal: answered 500

_REQUEST_ENCODER = msgspec.msgpack.Encoder()
_REQUEST_DECODER = msgspec.msgpack.Decoder(EdgeRequest)
_REPLY_DECODER = msgspec.msgpack.Decoder(EdgeReply)
_REFUSALS = {r.value: r for r in Refusal}
_OUTCOMES = {o.value: o for o in CommandOutcome}


class EdgeReplyError(ValueError):
    """An edge process answered something that is not a reply: it is treated as dead."""


def encode_request(host: str, compressed: bool, now: float, body: bytes) -> bytes:
    return _REQUEST_ENCODER.encode(EdgeRequest(host, compressed, now, body))


def decode_request(frame: bytes) -> EdgeRequest:
    return _REQUEST_DECODER.decode(frame)


def encode_batch(batch: IngestBatch) -> bytes:
    tables: dict[str, dict[str, list[Any]]] = {}
    buffers: dict[str, dict[str, bytes]] = {}
    for name, columns in batch.tables.items():
        if name not in BUFFER_TABLES:
            tables[name] = columns
            continue
        values_part, buffer_part = tables.setdefault(name, {}), buffers.setdefault(name, {})
        for column_name, values in columns.items():
            array = _as_buffer(_COLUMNS[name][column_name], values)
            if array is None:
                # a text column of a wire-version-2 batch is an object array: msgpack carries its values
                values_part[column_name] = values.tolist() if isinstance(values, np.ndarray) else values
            else:
                buffer_part[column_name] = array.tobytes()
    reply = EdgeReply(
        host=batch.host,
        boot_id=batch.boot_id,
        seq=batch.seq,
        sent_ts=batch.sent_ts,
        interval_seconds=batch.interval_seconds,
        agent_version=batch.agent_version,
        tables=tables,
        buffers=buffers,
        acks=[WireAck(a.command_id, a.outcome.value, a.detail) for a in batch.acks],
        rows=batch.rows,
    )
    return _REQUEST_ENCODER.encode(reply)


def _as_buffer(column: Column, values: list[Any]) -> Any:
    """`values` as the array of their column type's dtype, or None where they travel as values."""
    dtype = _BUFFER_DTYPES.get(column.sql_type)
    if dtype is None:
        return None
    if dtype.kind == "f":
        return np.array(values, dtype=dtype)  # None: NaN
    if None in values:
        return None
    return np.array(values, dtype=dtype)


def encode_refusal(reason: str, message: str) -> bytes:
    return _REQUEST_ENCODER.encode(EdgeReply(refusal=reason, message=message))


def decode_reply(frame: bytes) -> IngestBatch:
    """The batch an edge process checked; BatchRefused as it refused it; RuntimeError if its checks failed
    in a way that is not a refusal (the in-process edge would have raised too: a 500); EdgeReplyError if
    the frame is not a reply."""
    try:
        reply = _REPLY_DECODER.decode(frame)
    except msgspec.DecodeError as exc:
        raise EdgeReplyError(f"not an edge reply: {exc}") from exc
    if reply.refusal:
        if reply.refusal == INTERNAL:
            raise RuntimeError(f"the edge process failed: {reply.message[:200]}")
        reason = _REFUSALS.get(reply.refusal)
        if reason is None:
            raise EdgeReplyError(f"unknown refusal {reply.refusal[:40]!r}")
        raise BatchRefused(reason, reply.message)
    try:
        acks = [CommandAck(a.command_id, _OUTCOMES[a.outcome], a.detail) for a in reply.acks]
    except KeyError as exc:
        raise EdgeReplyError("unknown ack outcome") from exc
    tables: dict[str, Any] = reply.tables
    for name, buffers in reply.buffers.items():
        tables[name] = _with_arrays(name, tables.get(name, {}), buffers)
    return IngestBatch(
        host=reply.host,
        boot_id=reply.boot_id,
        seq=reply.seq,
        sent_ts=reply.sent_ts,
        interval_seconds=reply.interval_seconds,
        agent_version=reply.agent_version,
        tables=tables,
        acks=acks,
        rows=reply.rows,
    )


def _with_arrays(name: str, columns: dict[str, Any], buffers: dict[str, bytes]) -> dict[str, Any]:
    """A table's columns with its buffers read as arrays of the schema's dtype, one length for all."""
    by_name = _COLUMNS.get(name)
    if name not in BUFFER_TABLES or by_name is None:
        raise EdgeReplyError(f"buffers for table {name[:64]!r}")
    lengths = {len(v) for v in columns.values()}
    for column_name, raw in buffers.items():
        column = by_name.get(column_name)
        dtype = None if column is None else _BUFFER_DTYPES.get(column.sql_type)
        if dtype is None or len(raw) % dtype.itemsize:
            raise EdgeReplyError(f"buffer for column {name[:64]}.{column_name[:64]}")
        array = np.frombuffer(raw, dtype=dtype)
        lengths.add(len(array))
        columns[column_name] = array
    if len(lengths) > 1:
        raise EdgeReplyError(f"columns of {name[:64]} differ in length")
    return columns
