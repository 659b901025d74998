"""(host, boot_id, seq) of a spooled batch, read from the start of its compressed body in either wire version:
the NATS shipper names each message by it (`nats_subjects.msg_id`) without decoding the whole batch.

Both encoders write v, host, boot_id, seq first (`wire.OutgoingBatch.to_json`; version 2 keeps that order),
so the first _KEY_PREFIX_BYTES inflated bytes hold them. A body is the agent's own spool record, but it is
read as if hostile all the same: anything not in that shape is a ValueError, never another exception.
"""

from __future__ import annotations

import json
import re
import struct
import zlib

from fleetguard.shipping.wire_v2 import WIRE_VERSION_2

# This much of the inflated body holds the head (a host name and a boot id are short; longer is refused).
_KEY_PREFIX_BYTES = 2048
_V1_KEY = re.compile(rb'^\{"v":1,"host":("(?:[^"\\]|\\.)*"),"boot_id":("(?:[^"\\]|\\.)*"),"seq":(\d+)[,}]')
_V2_HEAD_KEYS = ("v", "host", "boot_id", "seq")
# msgpack's unsigned integers past the fixint range: marker -> (struct format, size).
_MSGPACK_UINTS = {0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8)}
# msgpack's strings past the fixstr range: marker -> (struct format of the length, its size).
_MSGPACK_STR_LENGTHS = {0xD9: (">B", 1), 0xDA: (">H", 2), 0xDB: (">I", 4)}
_MSGPACK_MAP_LENGTHS = {0xDE: 2, 0xDF: 4}


def batch_key(body: bytes) -> tuple[str, str, int]:
    """(host, boot_id, seq) of a batch in wire version 1 or 2; ValueError if the body is neither."""
    try:
        head = zlib.decompressobj(wbits=31).decompress(body, _KEY_PREFIX_BYTES)
    except zlib.error as exc:
        raise ValueError(f"not gzip: {exc}") from exc
    if head[:1] == b"{":
        return _v1_key(head)
    return _v2_key(head)


def _v1_key(head: bytes) -> tuple[str, str, int]:
    match = _V1_KEY.match(head)
    if match is None:
        raise ValueError("not a wire-format batch")
    try:
        return json.loads(match[1]), json.loads(match[2]), int(match[3])
    except (ValueError, RecursionError) as exc:  # a bad escape (json.JSONDecodeError is a ValueError)
        raise ValueError(f"not a wire-format batch: {exc}") from None


def _v2_key(head: bytes) -> tuple[str, str, int]:
    reader = _Head(head)
    if reader.map_length() < len(_V2_HEAD_KEYS):
        raise ValueError("not a wire-version-2 batch: too few fields")
    values: list[str | int] = []
    for key in _V2_HEAD_KEYS:
        if reader.text() != key:
            raise ValueError(f"not a wire-version-2 batch: {key!r} is not where it belongs")
        values.append(reader.uint() if key in ("v", "seq") else reader.text())
    version, host, boot_id, seq = values
    if version != WIRE_VERSION_2 or not isinstance(host, str) or not isinstance(boot_id, str):
        raise ValueError("not a wire-version-2 batch")
    assert isinstance(seq, int)
    return host, boot_id, seq


class _Head:
    """Reads the few msgpack items a version-2 head holds (a map's length, strings, unsigned integers) from
    a prefix of the body; every read is bounded by the prefix, and past its end is a ValueError."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def _take(self, n: int) -> bytes:
        end = self._at + n
        if end > len(self._data):
            raise ValueError("not a wire-version-2 batch: its head is cut short or too long")
        chunk, self._at = self._data[self._at : end], end
        return chunk

    def _marker(self) -> int:
        return self._take(1)[0]

    def _number(self, fmt: str, size: int) -> int:
        value: int = struct.unpack(fmt, self._take(size))[0]
        return value

    def map_length(self) -> int:
        marker = self._marker()
        if 0x80 <= marker <= 0x8F:
            return marker & 0x0F
        if marker in _MSGPACK_MAP_LENGTHS:
            size = _MSGPACK_MAP_LENGTHS[marker]
            return self._number(">H" if size == 2 else ">I", size)
        raise ValueError("not a wire-version-2 batch: not a map")

    def text(self) -> str:
        marker = self._marker()
        if 0xA0 <= marker <= 0xBF:
            length = marker & 0x1F
        elif marker in _MSGPACK_STR_LENGTHS:
            length = self._number(*_MSGPACK_STR_LENGTHS[marker])
        else:
            raise ValueError("not a wire-version-2 batch: a string expected")
        try:
            return self._take(length).decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"not a wire-version-2 batch: {exc}") from None

    def uint(self) -> int:
        marker = self._marker()
        if marker <= 0x7F:
            return marker
        if marker in _MSGPACK_UINTS:
            return self._number(*_MSGPACK_UINTS[marker])
        raise ValueError("not a wire-version-2 batch: an unsigned integer expected")
