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

from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal
from fleetguard.shipping.commands import CommandAck, CommandOutcome

# A checked batch is at most MAX_DECOMPRESSED_BYTES (16 MiB) of JSON; msgpack of the same values is no
# larger than its JSON text plus a few bytes per string. A frame past this is a worker gone wrong.
MAX_FRAME_BYTES = 40 << 20
HEADER = struct.Struct("!I")

Value = int | float | str | bool | None


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
    reply = EdgeReply(
        host=batch.host,
        boot_id=batch.boot_id,
        seq=batch.seq,
        sent_ts=batch.sent_ts,
        interval_seconds=batch.interval_seconds,
        agent_version=batch.agent_version,
        tables=batch.tables,
        acks=[WireAck(a.command_id, a.outcome.value, a.detail) for a in batch.acks],
        rows=batch.rows,
    )
    return _REQUEST_ENCODER.encode(reply)


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
