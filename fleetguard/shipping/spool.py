"""The agent's on-disk spool: every batch is appended here, durable, before anything is sent.

Append-only segment files `seg-<first record id>.log` in `spool_dir`; each record is one checksummed frame
(fleetguard.shipping.spool_frames: magic, length, record id, payload CRC, header CRC) and the payload (the
batch's request body, already compressed).

Durability: `append` writes the record and fsyncs the segment before it returns (once per flush interval,
5 s by default), and the directory on a new segment; so an acknowledged-to-the-agent batch survives a power
cut. Damage loses only what it touched: a record that does not check is skipped and counted
(`fleetguard_spool_records_corrupt_total`), and reading resyncs at the next frame that checks, so every record
after it is still sent. A torn tail (a crash mid-write) is cut off at open, and so are damaged bytes after
the last good frame; nothing that checks is ever cut. A payload is checked again when it is read for sending.

Deletion: a record is acked once the controller committed it; a segment is deleted when every record in it
is acked. Acks are not persisted: after a restart the unacked-in-memory records of surviving segments are
sent again, and the controller's ledger answers "duplicate" (stored once).

Bounded: past `max_bytes` the oldest segments are deleted, their unacked records counted as dropped.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from fleetguard.shipping.spool_frames import MAX_RECORD_BYTES, V2_HEADER_BYTES, encode_frame, scan_segment
from fleetguard.store.location import UnsafeStoreLocation, check_parents

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 4 << 20


# Segments and the directory are opened through no symbolic link: the agent runs as root, and a planted
# `seg-N.log -> /etc/passwd` would otherwise be truncated (a "torn tail") or appended to.
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class SpoolDirError(OSError):
    """The spool directory cannot be trusted (a link, another user's, writable by others); one line."""


@dataclass(frozen=True)
class SpoolRecord:
    record_id: int
    segment: int  # the segment's first record id (its name)
    offset: int  # of the payload
    length: int
    crc: int  # of the payload (checked again when it is read)


@dataclass
class _Segment:
    first_id: int
    path: Path
    size: int
    unacked: set[int]


@dataclass
class SpoolStats:
    appended: int = 0
    acked: int = 0
    dropped: int = 0  # unacked records deleted because the spool was full
    corrupt_tails: int = 0  # torn tails (a crash mid-write) cut off at open
    corrupt_records: int = 0  # damaged records skipped (at open: runs of damaged bytes; at read: a record)


class Spool:
    def __init__(self, directory: Path, max_bytes: int, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = min(segment_bytes, max(max_bytes // 4, 4096))
        self.stats = SpoolStats()
        self._lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        self._records: dict[int, SpoolRecord] = {}  # unacked, by id
        self._next_id = 1
        self._active: _Segment | None = None
        self._fd: int | None = None
        directory.mkdir(parents=True, exist_ok=True)
        _make_private(directory)  # batches name jobs and hosts: not for other local users
        self._load()

    # ---- open ---------------------------------------------------------------------------------------

    def _load(self) -> None:
        names = sorted(self.directory.glob("seg-*.log"))
        for index, path in enumerate(names):
            try:
                first = int(path.stem[4:])
            except ValueError:
                continue
            self._scan(first, path, last=index == len(names) - 1)
        for segment in list(self._segments.values()):
            if not segment.unacked and segment is not self._active:
                self._delete(segment)

    def _scan(self, first: int, path: Path, *, last: bool) -> None:
        segment = _Segment(first, path, 0, set())
        try:
            fd = os.open(path, os.O_RDWR | _NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:  # a link (ELOOP), a FIFO ...: not a segment this agent wrote
            log.warning("spool %s: not a segment this agent wrote (%s); skipped", path, exc.strerror)
            return
        with os.fdopen(fd, "r+b") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                log.warning("spool %s: not a regular file of this user; skipped", path)
                return
            data = fh.read()
            segment.size = self._records_of(first, segment, data, path)
            if segment.size < len(data):
                fh.truncate(segment.size)
                os.fsync(fh.fileno())
        self._segments[first] = segment
        if last and segment.size < self.segment_bytes:
            self._active = segment

    def _records_of(self, first: int, segment: _Segment, data: bytes, path: Path) -> int:
        """Index the good records of a segment's bytes; return where the good data ends (what follows it
        holds no record that checks)."""
        scan = scan_segment(data)
        for frame in scan.frames:
            self._records[frame.record_id] = SpoolRecord(
                frame.record_id, first, frame.offset, frame.length, frame.crc
            )
            segment.unacked.add(frame.record_id)
            self._next_id = max(self._next_id, frame.record_id + 1)
        if scan.torn_tail:
            self.stats.corrupt_tails += 1
            log.warning("spool %s: a record cut short at %d (a crash mid-write) cut off", path, scan.end)
        if scan.damaged:
            self.stats.corrupt_records += scan.damaged
            log.error(
                "spool %s: %d damaged run(s) of bytes skipped; the %d records that check are kept",
                path,
                scan.damaged,
                len(scan.frames),
            )
        return scan.end

    # ---- the agent's side -----------------------------------------------------------------------------

    def append(self, payload: bytes) -> int:
        """Store one batch durably; return its record id."""
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(f"a spool record holds at most {MAX_RECORD_BYTES} bytes")
        with self._lock:
            record_id = self._next_id
            self._next_id += 1
            segment = self._writable(record_id)
            header = encode_frame(record_id, payload)
            fd = self._open_fd(segment)
            try:
                _write_all(fd, header + payload)
                os.fsync(fd)
            except OSError:
                # Disk full (or a file size limit): a part of the record may be on disk. Cut it off, so the
                # next record starts where the index says and a reopen does not stop at the torn bytes in the
                # middle (dropping every record after them).
                self._next_id -= 1
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, segment.size)
                raise
            self._records[record_id] = SpoolRecord(
                record_id, segment.first_id, segment.size + V2_HEADER_BYTES, len(payload), zlib.crc32(payload)
            )
            segment.size += V2_HEADER_BYTES + len(payload)
            segment.unacked.add(record_id)
            self.stats.appended += 1
            self._enforce_limit()
            return record_id

    def _writable(self, record_id: int) -> _Segment:
        active = self._active
        if active is None or active.size >= self.segment_bytes:
            self._close_fd()
            if active is not None and not active.unacked:
                self._delete(active)
            path = self.directory / f"seg-{record_id:016d}.log"
            active = _Segment(record_id, path, 0, set())
            self._segments[record_id] = active
            self._active = active
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW, 0o600)
            self._fd = fd
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the new file's name is durable too
            finally:
                os.close(dir_fd)
        return active

    def _open_fd(self, segment: _Segment) -> int:
        if self._fd is None:
            self._fd = os.open(segment.path, os.O_WRONLY | os.O_APPEND | _NOFOLLOW)
        return self._fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _enforce_limit(self) -> None:
        while self.size_bytes() > self.max_bytes:
            oldest = min(
                (s for s in self._segments.values() if s is not self._active),
                default=None,
                key=lambda s: s.first_id,
            )
            if oldest is None:
                return
            self.stats.dropped += len(oldest.unacked)
            log.error(
                "spool %s is full (%d bytes): dropped %d unsent batches, oldest first",
                self.directory,
                self.max_bytes,
                len(oldest.unacked),
            )
            self._delete(oldest)

    def _delete(self, segment: _Segment) -> None:
        for record_id in segment.unacked:
            self._records.pop(record_id, None)
        self._segments.pop(segment.first_id, None)
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()
        if segment is self._active:
            self._active = None
            self._close_fd()

    # ---- the shipper's side ---------------------------------------------------------------------------

    def pending(self) -> int:
        with self._lock:
            return len(self._records)

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments.values())

    def oldest(self) -> SpoolRecord | None:
        with self._lock:
            return self._records[min(self._records)] if self._records else None

    def newest(self) -> SpoolRecord | None:
        with self._lock:
            return self._records[max(self._records)] if self._records else None

    def read(self, record: SpoolRecord) -> bytes | None:
        """The payload, or None if its segment was dropped meanwhile or the record was damaged on disk since
        it was written (then it is dropped and counted: sending it would only be refused)."""
        with self._lock:
            segment = self._segments.get(record.segment)
            if segment is None or record.record_id not in segment.unacked:
                return None
            fd = os.open(segment.path, os.O_RDONLY | _NOFOLLOW)
        try:
            data = os.pread(fd, record.length, record.offset)
        finally:
            os.close(fd)
        if len(data) == record.length and zlib.crc32(data) == record.crc:
            return data
        log.error("spool %s: record %d was damaged on disk; dropped", self.directory, record.record_id)
        with self._lock:
            self.stats.corrupt_records += 1
            self._forget(record.record_id)
        return None

    def ack(self, record_id: int) -> None:
        """The controller committed this record (or refused it for good): it need not be sent again."""
        with self._lock:
            if self._forget(record_id):
                self.stats.acked += 1

    def _forget(self, record_id: int) -> bool:
        """Drop a record from the index (and its segment once nothing in it is left); False if unknown."""
        record = self._records.pop(record_id, None)
        if record is None:
            return False
        segment = self._segments.get(record.segment)
        if segment is None:
            return True
        segment.unacked.discard(record_id)
        if not segment.unacked and segment is not self._active:
            self._delete(segment)
        return True

    def close(self) -> None:
        with self._lock:
            self._close_fd()


def _make_private(directory: Path) -> None:
    """Make `directory` 0700, if it is this user's own directory reached through no link and no directory
    above it can be changed by another user; else refuse it. (Another user's directory would let them read
    every batch, and plant segments to be shipped or links; a parent of theirs, swap the whole directory.)"""
    try:
        check_parents(directory, "spool_dir")
    except UnsafeStoreLocation as exc:
        raise SpoolDirError(str(exc)) from exc
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError as exc:
        raise SpoolDirError(f"spool_dir {directory}: not a directory of its own ({exc.strerror})") from exc
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise SpoolDirError(f"spool_dir {directory}: owned by uid {st.st_uid}, not by this agent's user")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write part of `data` (a nearly full disk); a short write is an error here."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "short write to the spool")
        view = view[written:]
