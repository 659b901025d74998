"""How spool records are framed on disk, and how a segment's bytes are read back even when damaged.

A frame (v2, written since the spool survives damage) is a 24-byte header — magic `FGS2`, payload length,
record id, CRC-32 of the payload, CRC-32 of the 20 header bytes before it — then the payload. The header's
own checksum is what makes resyncing safe: a length is trusted only when its header checks, so one flipped
byte in a length cannot make the reader jump over good records. A frame that does not check is skipped by
scanning forward for the next offset where a whole frame (both checksums) checks.

Frames of the previous version (v1: magic `FGS1`, length, payload CRC, record id; no header checksum) are
still read, so an agent upgraded with a non-empty spool loses none of it; they are accepted only when their
payload checks, and resynced past like v2 frames.

Pure functions of bytes: fleetguard.shipping.spool does the I/O.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC_V1 = b"FGS1"
MAGIC_V2 = b"FGS2"
_MAGIC_STEM = b"FGS"  # what both magics start with: where a resync looks for the next frame
MAX_RECORD_BYTES = 64 << 20

_V1 = struct.Struct("<4sIIQ")  # magic, payload length, payload crc32, record id
_V2_BODY = struct.Struct("<4sIQI")  # magic, payload length, record id, payload crc32
_V2 = struct.Struct("<4sIQII")  # ... and the crc32 of the 20 bytes above
V2_HEADER_BYTES = _V2.size


@dataclass(frozen=True, slots=True)
class Frame:
    record_id: int
    offset: int  # of the payload
    length: int
    crc: int  # of the payload


@dataclass(frozen=True, slots=True)
class SegmentScan:
    frames: list[Frame]
    damaged: int  # runs of bytes between good frames that held no good frame (each at least one record)
    torn_tail: bool  # the bytes after the last good frame are the start of a frame cut short (a crash)
    end: int  # where the good data ends: what follows holds no good frame and may be cut off


def encode_frame(record_id: int, payload: bytes) -> bytes:
    """The header (v2) for `payload`; the caller writes header and payload together."""
    if len(payload) > MAX_RECORD_BYTES:
        raise ValueError(f"a spool record holds at most {MAX_RECORD_BYTES} bytes")
    body = _V2_BODY.pack(MAGIC_V2, len(payload), record_id, zlib.crc32(payload))
    return body + struct.pack("<I", zlib.crc32(body))


def _v2_header(data: bytes, offset: int) -> tuple[int, int, int] | None:
    """(length, record id, payload crc) if a v2 header that checks starts at `offset`."""
    if offset + V2_HEADER_BYTES > len(data):
        return None
    magic, length, record_id, crc, header_crc = _V2.unpack_from(data, offset)
    if magic != MAGIC_V2 or zlib.crc32(data[offset : offset + _V2_BODY.size]) != header_crc:
        return None
    if length > MAX_RECORD_BYTES:
        return None
    return length, record_id, crc


def _frame_at(data: bytes, offset: int) -> tuple[Frame | None, int | None]:
    """The whole frame at `offset` if it checks; else (None, where the next frame must start if this one's
    header checks and only its payload is damaged, or None when nothing here can be trusted)."""
    head = _v2_header(data, offset)
    if head is not None:
        length, record_id, crc = head
        start = offset + V2_HEADER_BYTES
        end = start + length
        if end <= len(data) and zlib.crc32(data[start:end]) == crc:
            return Frame(record_id, start, length, crc), None
        return None, (end if end <= len(data) else None)
    if offset + _V1.size <= len(data):
        magic, length, crc, record_id = _V1.unpack_from(data, offset)
        start = offset + _V1.size
        end = start + length
        if (
            magic == MAGIC_V1
            and length <= MAX_RECORD_BYTES
            and end <= len(data)
            and zlib.crc32(data[start:end]) == crc
        ):
            return Frame(record_id, start, length, crc), None
    return None, None


def _is_torn(data: bytes, offset: int) -> bool:
    """The bytes from `offset` to the end are the start of one frame a crash cut short."""
    rest = data[offset:]
    if len(rest) < V2_HEADER_BYTES:
        return MAGIC_V2.startswith(rest[:4]) or (len(rest) < _V1.size and MAGIC_V1.startswith(rest[:4]))
    head = _v2_header(data, offset)
    if head is not None:
        return offset + V2_HEADER_BYTES + head[0] > len(data)
    magic, length, _, _ = _V1.unpack_from(data, offset)
    return bool(magic == MAGIC_V1 and length <= MAX_RECORD_BYTES and offset + _V1.size + length > len(data))


def scan_segment(data: bytes) -> SegmentScan:
    """Every good frame of a segment's bytes, in order, resyncing past damage."""
    frames: list[Frame] = []
    damaged = 0
    bad_from: int | None = None  # where the current run of unreadable bytes began
    offset = 0
    while offset < len(data):
        frame, skip_to = _frame_at(data, offset)
        if frame is not None:
            if bad_from is not None:
                damaged += 1
                bad_from = None
            frames.append(frame)
            offset = frame.offset + frame.length
            continue
        if bad_from is None:
            bad_from = offset
        if skip_to is not None:
            offset = skip_to  # the header checks: its length is the record's, only its payload is bad
            continue
        found = data.find(_MAGIC_STEM, offset + 1)
        offset = len(data) if found < 0 else found
    if bad_from is None:
        return SegmentScan(frames, damaged, False, len(data))
    torn = _is_torn(data, bad_from)
    return SegmentScan(frames, damaged + (0 if torn else 1), torn, bad_from)
