"""The controller's ingest journal: a batch is answered once its body is on disk here, not once DuckDB has
committed it.

Why: a DuckDB commit waits for any checkpoint under way, and a checkpoint at 2,048 hosts stalls every commit
for 0.3-1 s however it is tuned (a smaller WAL checkpoints more often, re-compressing the row groups it had
left half full: BENCHMARKS.md, "Where the ingest p99 came from"). With the journal, an agent's wait is one
append and one fdatasync shared by every batch that arrived meanwhile (group commit); the writer's lanes
commit the same batches to DuckDB as before, and only then is a journal entry released. A controller killed
between the two replays its journal at the next start; the ingest ledger makes a replayed batch that had been
committed a duplicate, stored once.

On disk: segment files `<first id>.fgj` in one directory (0700, files 0600, never followed through a link),
each a magic line and then records: length, CRC-32, id, time received, gzip flag, host and the body as the
agent sent it. A segment whose entries are all released, and which is no longer appended to, is deleted. A
record that does not read back whole (a torn tail after a crash, a damaged disk) ends the replay of its
segment: a copy of the segment is kept as `<name>.damaged` for an operator, never deleted and never replayed,
and the segment is rewritten with the whole records before it, which stay until released like any others (a
second stop before they are stored loses none). A segment file that is not one (no magic, a link) is moved
aside whole to `<name>.damaged`; one created but stopped before its magic was written is removed.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import queue
import stat
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"FGJRNL1\n"
SUFFIX = ".fgj"
DAMAGED_SUFFIX = ".damaged"
REFUSED_SUFFIX = ".refused"
# A new segment past this (~3 s of batches at 2,048 hosts). A segment's file goes once all its entries are
# released, so a start reads again at most about this much that was stored already (the ledger skips it).
SEGMENT_BYTES = 8 << 20
MAX_BYTES = 2 << 30  # appends are refused past this much on disk (the writer's queue bounds it far below)
MAX_HOST_BYTES = 1024
# A queued append that has heard nothing this long looks whether anyone leads, and leads if not.
LEAD_CHECK_SECONDS = 1.0
SYNC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)  # seconds
# How often the entries set aside are counted again from the directory while some host is held for them
# (`recount_set_aside`): an operator who has looked at them and removed them frees the host without a restart.
RECOUNT_SECONDS = 10.0
MAX_BODY_BYTES = 64 << 20  # a record claiming more is damage, not a body (ingest bodies are at most 8 MB)
# No file longer than this is read as a segment (a segment holds SEGMENT_BYTES, or one larger record alone).
MAX_SEGMENT_FILE_BYTES = SEGMENT_BYTES + MAX_BODY_BYTES + (1 << 20)
# length (of what follows the CRC), CRC-32 (of what follows it), id, time received, gzip flag, host length
_HEAD = struct.Struct("<IIQdBH")
_AFTER_CRC = _HEAD.size - 8


class JournalError(Exception):
    """The journal could not take an entry (disk full, I/O error, closed): the batch is refused (503)."""


class JournalFull(JournalError):
    """The journal holds MAX_BYTES: the writer is far behind."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    host: str
    body: bytes  # as the agent sent it
    compressed: bool  # gzip
    received: float  # the controller's clock when it was accepted (replay checks times against it)


@dataclass(slots=True)
class _Segment:
    first_id: int
    path: Path
    size: int
    # the ids not yet released: a set, not a count, so that releasing an id this segment does not hold (one
    # replayed from a segment set aside, one released twice) cannot make it look empty while it holds entries
    held: set[int] = field(default_factory=set)
    open: bool = False  # the one being appended to
    failed: bool = False  # a sync of it failed: no record of it not yet synced is acknowledged
    gone: bool = False  # deleted


@dataclass(slots=True)
class _Append:
    """Entries queued to be written, and what became of them (set by the leader, then `event`)."""

    entries: list[JournalEntry]
    sizes: list[int]
    event: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # woken to lead: write and sync what is queued
    done: bool = False
    ids: list[int] = field(default_factory=list)
    error: JournalError | None = None

    def settle(self, ids: list[int] | None = None, error: JournalError | None = None) -> None:
        self.ids, self.error, self.done = ids or [], error, True
        self.event.set()


def _host_of(entry: JournalEntry) -> bytes:
    """The host as stored; JournalError (the batch refused, not a traceback) when it cannot be."""
    try:
        host = entry.host.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate: not a host name the record could hold
        raise JournalError(f"entry host cannot be stored: {exc.reason}") from exc
    if len(host) > MAX_HOST_BYTES or len(entry.body) > MAX_BODY_BYTES:
        raise JournalError("entry too large for the journal")
    return host


def encoded_size(entry: JournalEntry) -> int:
    """The bytes `encode` makes of `entry` (JournalError when it cannot be stored)."""
    return _HEAD.size + len(_host_of(entry)) + len(entry.body)


def encode(entry_id: int, entry: JournalEntry) -> bytes:
    host = _host_of(entry)
    after = struct.pack("<QdBH", entry_id, entry.received, int(entry.compressed), len(host))
    crc = zlib.crc32(entry.body, zlib.crc32(host, zlib.crc32(after)))
    length = _AFTER_CRC + len(host) + len(entry.body)
    return struct.pack("<II", length, crc) + after + host + entry.body


def decode(data: bytes) -> tuple[list[tuple[int, JournalEntry]], int]:
    """The whole records at the start of `data` (a segment less its magic) and where they end: at the end of
    `data` when every record read back whole, before it when one did not."""
    out: list[tuple[int, JournalEntry]] = []
    view = memoryview(data)
    at = 0
    last_id = -1
    while at + _HEAD.size <= len(data):
        length, crc, entry_id, received, compressed, host_len = _HEAD.unpack_from(data, at)
        end = at + 8 + length
        if length < _AFTER_CRC + host_len or end > len(data) or host_len > MAX_HOST_BYTES:
            break
        if length - _AFTER_CRC - host_len > MAX_BODY_BYTES or compressed > 1 or entry_id <= last_id:
            break
        if zlib.crc32(view[at + 8 : end]) != crc:
            break
        host_at = at + _HEAD.size
        try:
            host = bytes(view[host_at : host_at + host_len]).decode()
        except UnicodeDecodeError:
            break
        body = bytes(view[host_at + host_len : end])
        out.append((entry_id, JournalEntry(host, body, bool(compressed), received)))
        last_id = entry_id
        at = end
    return out, at


class Journal:
    """Append entries durably, release them once stored elsewhere; replay what a previous run left."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES, max_bytes: int = MAX_BYTES):
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        # Segments, held ids and counters: held briefly, by the leader and by `release` (never across I/O
        # but a rotation's or a close's).
        self._cond = threading.Condition()
        # Appends queue here and wait on their own event; whoever holds `_leader` writes and syncs all that
        # is queued, then hands the lead to the next queued append. A handler thread takes no contended lock
        # (a lock handed between hundreds of threads cost a switch of the interpreter lock each time, and
        # while a diagnosis round held the interpreter those handoffs were the ingest p99).
        self._queue: queue.SimpleQueue[_Append] = queue.SimpleQueue()
        self._leader = threading.Lock()
        self._segments: list[_Segment] = []  # by first id
        self._firsts: list[int] = []
        self._fd: int | None = None  # the open segment's: written and synced by the leader only
        self._next_id = 1
        self._closed = False
        # The segments a previous run left, with the ids each held at start: read again one at a time by
        # `iter_replay` (holding every body at once could take the whole bound, 2 GiB, in memory).
        self._to_replay: list[tuple[Path, frozenset[int]]] = []
        self.bytes_on_disk = 0
        # The entries set aside (`set_aside`), per host, and their files' bytes (in bytes_on_disk too): a
        # host's count holds its batches back (`IngestWriter`), so that one host whose batches the store
        # refuses cannot fill the bound for every host. Under _cond; read without it (a dict lookup).
        self.set_aside_by_host: dict[str, int] = {}
        self._set_aside_bytes = 0
        self._recounted_at = float("-inf")  # time.monotonic()
        # One set-aside or recount at a time: a recount must not miss a file written while it reads the
        # directory and then overwrite the count that file added.
        self._set_aside_lock = threading.Lock()
        # Per set-aside file name, as the last count found it: (inode, size, mtime) and (host, size) or None
        # for a file not ours. Under _set_aside_lock.
        self._set_aside_seen: dict[str, tuple[tuple[int, int, int], tuple[str, int] | None]] = {}
        self.syncs = 0
        # fdatasync's wall time: the floor under every answer, and what a disk shared with the store's
        # checkpoints stretches (per SYNC_BUCKETS bound, the last one +Inf; under no lock: one leader syncs)
        self.sync_counts = [0] * (len(SYNC_BUCKETS) + 1)
        self.sync_seconds = 0.0
        self.appended = 0

    @classmethod
    def open(cls, directory: Path, **limits: int) -> Journal:
        """The journal in `directory` (made 0700 if missing), with what a previous run left read in."""
        journal = cls(directory, **limits)
        _own_directory(directory)
        try:
            journal._load()
        except OSError as exc:  # a segment that can be neither read, removed nor set aside
            raise JournalError(f"journal directory {directory} cannot be read back: {exc}") from exc
        return journal

    # ---- start: what a previous run left -----------------------------------------------------------

    def _load(self) -> None:
        # Set aside by a run before: still in the bound, still the host's. A file named like one that is not
        # one (a link, a FIFO, another program's, longer than an entry can be) is the journal's neither to
        # count nor to remove.
        for path in self._recount_set_aside():
            log.warning("%s is named like an entry set aside but is not one: left alone, not counted", path)
        for path in sorted(self.directory.glob("*" + SUFFIX), key=_first_id_of):
            first = _first_id_of(path)
            if first < 0:
                continue
            # past every segment's name, whole or not: a new segment never takes the name of one set aside,
            # whose `.damaged` copy a second set-aside of the same name would overwrite
            self._next_id = max(self._next_id, first + 1)
            try:
                data = _read_private(path)
            except OSError as exc:  # a link (never followed) or a file we may not read
                self._set_aside(path, f"it cannot be read as a segment ({exc})")
                continue
            if MAGIC.startswith(data):
                path.unlink()  # created and stopped before its magic was whole: it never held a record
                continue
            if not data.startswith(MAGIC):
                self._set_aside(path, "it does not start as a journal segment does")
                continue
            records, end = decode(data[len(MAGIC) :])
            if not records:
                if len(MAGIC) + end == len(data):
                    path.unlink()  # nothing in it: a segment opened just before a stop
                else:
                    self._set_aside(path, f"a record at byte {len(MAGIC)} does not read back whole")
                continue
            if len(MAGIC) + end != len(data):
                whole = data[: len(MAGIC) + end]
                self._keep_whole(path, data, whole, f"a record at byte {len(whole)} does not read back whole")
                data = whole
            self._next_id = max(self._next_id, records[-1][0] + 1)
            self._to_replay.append((path, frozenset(i for i, _ in records)))
            self._add_segment(_Segment(records[0][0], path, len(data), held={i for i, _ in records}))
            self.bytes_on_disk += len(data)  # taken off again when it goes: counted as it comes

    def set_aside_of(self, host: str) -> int:
        """How many of `host`'s entries are set aside (their files still in the journal directory)."""
        return self.set_aside_by_host.get(host, 0)

    def recount_set_aside(self) -> None:
        """Count the entries set aside again from the directory, at most once every RECOUNT_SECONDS: the
        files an operator removed stop counting, in the bound and against their host."""
        with self._cond:
            if time.monotonic() - self._recounted_at < RECOUNT_SECONDS:
                return
            self._recounted_at = time.monotonic()  # one caller counts; the others take what it finds
        try:
            self._recount_set_aside()
        except OSError as exc:
            log.error("the journal's entries set aside could not be counted again: %s", exc)

    def _recount_set_aside(self) -> list[Path]:
        with self._set_aside_lock:
            return self._recount_set_aside_locked()

    def _recount_set_aside_locked(self) -> list[Path]:
        """Count the set-aside files again; the paths named like one that are not one (left uncounted)."""
        by_host: dict[str, int] = {}
        total = 0
        foreign: list[Path] = []
        seen: dict[str, tuple[tuple[int, int, int], tuple[str, int] | None]] = {}
        for path in self.directory.glob("*" + SUFFIX + REFUSED_SUFFIX):
            try:
                st = path.lstat()
                # A file read at an earlier count, unchanged since, is not opened again: while hosts are
                # held this runs every RECOUNT_SECONDS on the path that accepts batches.
                same = (st.st_ino, st.st_size, st.st_mtime_ns)
                known = self._set_aside_seen.get(path.name)
                found = known[1] if known is not None and known[0] == same else _set_aside_file(path)
            except OSError:
                continue  # gone meanwhile (an operator's removal), or unreadable: not counted
            seen[path.name] = (same, found)
            if found is None:
                foreign.append(path)
                continue
            host, size = found
            total += size
            by_host[host] = by_host.get(host, 0) + 1
        self._set_aside_seen = seen
        with self._cond:
            self._recounted_at = time.monotonic()
            self.bytes_on_disk += total - self._set_aside_bytes
            self._set_aside_bytes = total
            self.set_aside_by_host = by_host
        return foreign

    def _set_aside(self, path: Path, why: str) -> None:
        damaged = path.with_name(path.name + DAMAGED_SUFFIX)
        log.error(
            "journal segment %s: %s; nothing of it is replayed, the file is kept as %s", path, why, damaged
        )
        os.replace(path, damaged)

    def _keep_whole(self, path: Path, data: bytes, whole: bytes, why: str) -> None:
        """A copy of the damaged segment `data` kept aside, and the segment rewritten with its `whole`
        records only: they stay in the journal until released, so a second stop before they are stored loses
        none of them, and the damage is never read again. A stop between the two steps reads the same
        damaged segment at the next start, and keeps the copy made first."""
        damaged = path.with_name(path.name + DAMAGED_SUFFIX)
        log.error(
            "journal segment %s: %s; its whole records are replayed, the file is kept as %s",
            path,
            why,
            damaged,
        )
        _write_durably(damaged, data, exclusive=True)
        partial = path.with_name(path.name + ".partial")
        _write_durably(partial, whole, exclusive=False)
        os.replace(partial, path)
        _sync_directory(self.directory)

    def replay(self) -> list[tuple[int, JournalEntry]]:
        """`iter_replay`, all at once."""
        return list(self.iter_replay())

    def iter_replay(self) -> Iterator[tuple[int, JournalEntry]]:
        """The entries a previous run appended and did not release, in order, read a segment at a time
        (once: a second call yields nothing). Release each once it is stored, as for an appended one.

        A segment that cannot be read back as it was at start (a disk error since) yields nothing more: its
        entries stay held, so the segment stays for the next start, and the error is logged."""
        segments, self._to_replay = self._to_replay, []
        for path, ids in segments:
            try:
                data = _read_private(path)
            except OSError as exc:
                log.error(
                    "journal segment %s cannot be read again to replay it (%s); kept for the next start",
                    path,
                    exc,
                )
                continue
            records, _ = decode(data[len(MAGIC) :]) if data.startswith(MAGIC) else ([], 0)
            found = [(i, entry) for i, entry in records if i in ids]
            if len(found) != len(ids):
                log.error(
                    "journal segment %s changed since the start: %d of its %d entries read back; the rest "
                    "stay in it for the next start",
                    path,
                    len(found),
                    len(ids),
                )
            del data, records
            yield from found

    # ---- appending ---------------------------------------------------------------------------------

    def append(self, entry: JournalEntry) -> int:
        """Write `entry` and return its id once it is on disk (fdatasync'd: shared by the appends that came
        meanwhile). JournalError when it cannot be."""
        return self.append_many([entry])[0]

    def append_many(self, entries: Sequence[JournalEntry]) -> list[int]:
        """`append` of each, with one fdatasync for them all (and whatever others queued meanwhile); taken
        whole or refused whole (JournalError: none of them is acknowledged)."""
        if self._closed:
            raise JournalError("the journal is closed")
        item = _Append(list(entries), [encoded_size(entry) for entry in entries])
        self._queue.put(item)
        if self._leader.acquire(blocking=False):
            self._lead(None)
        while not item.done:
            if not item.event.wait(LEAD_CHECK_SECONDS):
                # Queued while nobody led (an append racing close(), or any wake-up lost): lead ourselves.
                if self._leader.acquire(blocking=False):
                    self._lead(None)
                continue
            item.event.clear()
            if item.lead and not item.done:  # handed the lead: write and sync what is queued, this first
                item.lead = False
                self._leader.acquire()
                self._lead(item)
        if item.error is not None:
            raise item.error
        return item.ids

    def queued(self) -> int:
        """Appends waiting for the leader (for tests and metrics)."""
        return self._queue.qsize()

    def _lead(self, first: _Append | None) -> None:
        """Holding `_leader`: write and sync every queued append (`first` before them), then hand the lead to
        the next one queued, or let it go once none is (and take it again if one came meanwhile)."""
        while True:
            group = [first] if first is not None else []
            first = None
            while True:
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if group:
                try:
                    self._commit(group)
                except Exception as exc:  # not I/O (that is a JournalError): a MemoryError, a bug
                    # Never out of here holding the lead with the group unsettled: every append after it
                    # would wait for ever. Refused: none of it is acknowledged (a record written meanwhile
                    # may replay; the ledger stores it once).
                    log.exception("journal append failed")
                    with self._cond:
                        self._close_segment()
                    for item in group:
                        if not item.done:
                            item.settle(error=JournalError(f"the journal append failed: {exc!r}"))
            try:
                following = self._queue.get_nowait()
            except queue.Empty:
                following = None
            self._leader.release()
            if following is not None:
                following.lead = True
                following.event.set()
                return
            # One queued after the look and before the release found the lead taken: look again.
            if self._queue.empty() or not self._leader.acquire(blocking=False):
                return

    def _commit(self, group: list[_Append]) -> None:
        """Write each append's records, sync once, then settle each (ids, or the error) and wake it."""
        written: list[tuple[_Append, list[tuple[_Segment, int]]]] = []
        with self._cond:
            planned = self.bytes_on_disk
            for item in group:
                if self._closed:
                    item.settle(error=JournalError("the journal is closed"))
                elif planned + sum(item.sizes) > self.max_bytes:
                    held = self.bytes_on_disk >> 20
                    item.settle(error=JournalFull(f"the journal holds {held} MB: the store is far behind"))
                else:
                    planned += sum(item.sizes)
                    written.append((item, []))
        failed: JournalError | None = None  # a failed write fails the rest of the group too
        for item, records in written:
            if failed is not None:
                item.error = failed
                continue
            for entry, size in zip(item.entries, item.sizes, strict=True):
                try:
                    with self._cond:
                        segment = self._writable(size)
                        entry_id = self._next_id
                        self._next_id += 1
                    fd = self._fd
                    assert fd is not None
                    _write_all(fd, encode(entry_id, entry))
                except JournalError as exc:
                    failed = item.error = exc
                    break
                except OSError as exc:
                    with self._cond:
                        self._close_segment()  # its tail may be torn: later records go to a new segment
                    failed = item.error = JournalError(f"the journal cannot be written: {exc}")
                    break
                with self._cond:
                    segment.size += size
                    segment.held.add(entry_id)
                    self.bytes_on_disk += size
                records.append((segment, entry_id))
        self._sync_open(written)
        with self._cond:
            for item, records in written:
                error = item.error
                if error is None and any(segment.failed for segment, _ in records):
                    error = JournalError("the journal could not be synced to disk")
                if error is not None:
                    for segment, entry_id in records:  # refused with the rest: never to be released
                        segment.held.discard(entry_id)
                        self._drop_if_done(segment)
                    item.settle(error=error)
                else:
                    self.appended += len(records)
                    item.settle(ids=[entry_id for _, entry_id in records])

    def _sync_open(self, written: list[tuple[_Append, list[tuple[_Segment, int]]]]) -> None:
        """fdatasync the open segment if this group wrote to it (a segment closed by a rotation on the way
        was synced by its close); a failure fails the segment and closes it."""
        fd = self._fd
        touched = {id(seg): seg for _, records in written for seg, _ in records}
        current = self._segments[-1] if self._segments and self._segments[-1].open else None
        if fd is None or current is None or id(current) not in touched:
            return
        try:
            started = time.monotonic()
            os.fdatasync(fd)
            took = time.monotonic() - started
            self.syncs += 1
            self.sync_seconds += took
            self.sync_counts[bisect.bisect_left(SYNC_BUCKETS, took)] += 1
        except OSError as exc:
            log.error("journal segment %s could not be synced: %s", current.path, exc)
            with self._cond:
                current.failed = True
                self._close_segment()

    def set_aside(self, entry_id: int, entry: JournalEntry, why: str) -> Path:
        """Keep an entry the store refused in a file of its own (`<id>.fgj.refused`, a one-record segment),
        then release it: it was acknowledged, so it is never dropped; `entries_in` reads it back."""
        path = self.directory / f"{entry_id:020d}{SUFFIX}{REFUSED_SUFFIX}"
        data = MAGIC + encode(entry_id, entry)
        with self._set_aside_lock:
            try:  # set aside before (a replayed entry refused again): the same bytes, counted once
                ours = _set_aside_file(path)
            except FileNotFoundError:
                ours = None
            # Anything else under that name was not counted (`_recount_set_aside`): replaced, and this counted
            before = 0 if ours is None else ours[1]
            _write_durably(path, data, exclusive=False)
            _sync_directory(self.directory)
            # counted in the bound until an operator removes it: refusals cannot fill the disk
            with self._cond:
                self.bytes_on_disk += len(data) - before
                self._set_aside_bytes += len(data) - before
                if not before:  # a replayed entry refused again is the same file: counted once for its host
                    self.set_aside_by_host[entry.host] = self.set_aside_by_host.get(entry.host, 0) + 1
        log.error("journal entry %d from %s set aside in %s: %s", entry_id, entry.host, path, why)
        self.release([entry_id])
        return path

    def _writable(self, size: int) -> _Segment:
        """The segment to append `size` bytes to (a new one past segment_bytes)."""
        while True:
            current = self._segments[-1] if self._segments and self._segments[-1].open else None
            if current is None:
                break
            if current.size + size <= self.segment_bytes:
                return current
            self._close_segment()  # may wait for a sync: another append may open the next one meanwhile
        if self._closed:  # closed while this append waited: no segment may be opened after close()
            raise JournalError("the journal is closed")
        path = self.directory / f"{self._next_id:020d}{SUFFIX}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except OSError as exc:  # a full disk, a link or a stray file where the segment goes
            raise JournalError(f"the journal cannot create {path}: {exc}") from exc
        try:
            _write_all(fd, MAGIC)
            # The file's name durable too (once a segment): an fdatasync of the file does not make its
            # directory entry durable, and a power loss could take a new segment with every record
            # acknowledged in it.
            _sync_directory(self.directory)
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise JournalError(f"the journal cannot be written: {exc}") from exc
        self._fd = fd
        segment = _Segment(self._next_id, path, len(MAGIC), open=True)
        self._add_segment(segment)
        self.bytes_on_disk += len(MAGIC)
        return segment

    def _close_segment(self) -> None:
        """Stop appending to the open segment, then sync and close its file (by the leader, or by close()
        holding the lead: no sync of it can be under way). A failed sync fails the records of it that this
        group wrote: after one, the kernel may have dropped pages it could not write."""
        if not (self._segments and self._segments[-1].open):
            return
        segment = self._segments[-1]
        segment.open = False  # from here appends open a new segment, never write after a torn record
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                segment.failed = True
                log.error("journal segment %s could not be synced: %s", segment.path, exc)
            finally:
                os.close(fd)
        self._drop_if_done(segment)

    def _add_segment(self, segment: _Segment) -> None:
        self._segments.append(segment)
        self._firsts.append(segment.first_id)

    # ---- releasing ---------------------------------------------------------------------------------

    def release(self, ids: Iterable[int]) -> None:
        """These entries are stored (or set aside): a closed segment left with none is deleted."""
        with self._cond:
            emptied: set[int] = set()
            for entry_id in ids:
                at = bisect.bisect_right(self._firsts, entry_id) - 1
                if at < 0:
                    continue
                segment = self._segments[at]
                if entry_id in segment.held:
                    segment.held.discard(entry_id)
                    if not segment.held:
                        emptied.add(at)
            for at in sorted(emptied, reverse=True):
                self._drop_if_done(self._segments[at])

    def _drop_if_done(self, segment: _Segment) -> None:
        if segment.open or segment.held or segment.gone:
            return
        try:
            segment.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("journal segment %s could not be removed: %s", segment.path, exc)
            return
        segment.gone = True
        at = self._segments.index(segment)
        del self._segments[at], self._firsts[at]
        self.bytes_on_disk -= segment.size

    @property
    def held(self) -> int:
        """Entries appended (or replayed) and not yet released."""
        with self._cond:
            return sum(len(s.held) for s in self._segments)

    def close(self) -> None:
        """Stop appending (what is queued meanwhile is refused); a segment with every entry released is
        deleted (a clean stop leaves none)."""
        with self._leader:  # after the group under way, if any
            with self._cond:
                self._closed = True
                self._close_segment()
            while True:
                try:
                    self._queue.get_nowait().settle(error=JournalError("the journal is closed"))
                except queue.Empty:
                    break


def _first_id_of(path: Path) -> int:
    stem = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else ""
    return int(stem) if stem.isdigit() and len(stem) == 20 else -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _own_directory(directory: Path) -> None:
    """`directory` made 0700 if missing; refused if it is a link or others may write to it."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(directory)
    except OSError as exc:
        raise JournalError(f"journal directory {directory}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise JournalError(f"journal directory {directory} is not a directory (a link is not followed)")
    if st.st_mode & 0o022:
        raise JournalError(f"journal directory {directory} may be written by others: chmod go-w it")
    if st.st_uid != os.geteuid():
        raise JournalError(f"journal directory {directory} belongs to another user")


def _write_durably(path: Path, data: bytes, exclusive: bool) -> None:
    """`path` (0600, never through a link) holding `data`, synced; `exclusive`: an existing one is kept.
    Non-blocking: a FIFO under that name fails the open (no reader) rather than wait for one."""
    flags = (
        os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_EXCL if exclusive else os.O_TRUNC)
    )
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        if exclusive:
            return
        raise
    try:
        _write_all(fd, data)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_private(path: Path) -> bytes:
    """A segment's bytes: OSError for anything but a regular file (a FIFO would block the start, a link is
    not followed) or one longer than any segment can be (it would be read whole into memory)."""
    limit = MAX_SEGMENT_FILE_BYTES
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"longer than a segment can be ({st.st_size} bytes)", str(path))
        return f.read(limit + 1)


def _set_aside_file(path: Path) -> tuple[str, int] | None:
    """The host of the one entry a set-aside file holds, read from its head, and the file's size; None for a
    file that is not one: not a regular file (no link followed, no FIFO or device opened: a FIFO would block,
    a device may act on an open), longer than one entry can be, or not our format."""
    if not stat.S_ISREG(path.lstat().st_mode):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())  # the file opened, whatever the name held at the lstat
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SEGMENT_FILE_BYTES:
            return None
        head = f.read(len(MAGIC) + _HEAD.size + MAX_HOST_BYTES)
    if not head.startswith(MAGIC) or len(head) < len(MAGIC) + _HEAD.size:
        return None
    host_len = _HEAD.unpack_from(head, len(MAGIC))[5]
    start = len(MAGIC) + _HEAD.size
    if host_len > MAX_HOST_BYTES or len(head) < start + host_len:
        return None
    try:
        return head[start : start + host_len].decode(), st.st_size
    except UnicodeDecodeError:
        return None


def entries_in(directory: Path, suffix: str = SUFFIX) -> Iterator[tuple[int, JournalEntry]]:
    """Every readable entry in `directory`'s files ending `suffix` (segments; SUFFIX + REFUSED_SUFFIX for
    the entries set aside), in name order: for operators' tools and tests."""
    for path in sorted(directory.glob("*" + suffix), key=lambda p: p.name):
        data = _read_private(path)
        if data.startswith(MAGIC):
            yield from decode(data[len(MAGIC) :])[0]
