"""The journal under concurrent appends (group commit), failing writes and syncs, and a hostile directory.

Overlap is made deterministic by an os.fdatasync that waits for an event the test sets once the other appends
have queued for the leader; nothing here asserts on time."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.controller.journal import DAMAGED_SUFFIX, MAGIC, SUFFIX, Journal, JournalEntry, JournalError

_real_write = os.write
_real_fdatasync = os.fdatasync
_real_close = os.close


def entry(i: int) -> JournalEntry:
    return JournalEntry(f"host-{i}", f"body {i}".encode() * 4, False, 1_700_000_000.0 + i)


class Outcome:
    """What one appending thread got: an id or the error."""

    def __init__(self) -> None:
        self.entry_id: int | None = None
        self.error: JournalError | None = None
        self.unexpected: Exception | None = None


def appending(journal: Journal, i: int) -> tuple[threading.Thread, Outcome]:
    outcome = Outcome()

    def run() -> None:
        try:
            outcome.entry_id = journal.append(entry(i))
        except JournalError as exc:
            outcome.error = exc
        except Exception as exc:  # anything else is a defect: kept so that the test says so
            outcome.unexpected = exc

    thread = threading.Thread(target=run, name=f"append-{i}")
    thread.start()
    return thread, outcome


class Writes:
    """os.write passed through, counting the records written (not the magic) for who waits on a count."""

    def __init__(self) -> None:
        self.records = 0
        self.cond = threading.Condition()
        self.fail_next = False

    def __call__(self, fd: int, data: bytes | memoryview) -> int:
        if bytes(data[: len(MAGIC)]) != MAGIC:
            with self.cond:
                if self.fail_next:
                    self.fail_next = False
                    written = _real_write(fd, bytes(data[:5]))  # a torn record, as a full disk leaves one
                    assert written == 5
                    raise OSError(errno.ENOSPC, "No space left on device")
                self.records += 1
                self.cond.notify_all()
        return _real_write(fd, data)

    def wait_for(self, count: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.records >= count, timeout=20)


class Syncs:
    """os.fdatasync whose calls, by number from 1, may wait for an event or fail; the rest pass through."""

    def __init__(self) -> None:
        self.calls = 0
        self.hold: dict[int, threading.Event] = {}
        self.entered: dict[int, threading.Event] = {}
        self.fail: set[int] = set()
        self.in_sync: set[int] = set()  # fds being synced right now
        self.closed_while_synced: list[int] = []
        self.lock = threading.Lock()

    def hold_call(self, n: int) -> tuple[threading.Event, threading.Event]:
        self.hold[n], self.entered[n] = threading.Event(), threading.Event()
        return self.entered[n], self.hold[n]

    def __call__(self, fd: int) -> None:
        with self.lock:
            self.calls += 1
            n = self.calls
            self.in_sync.add(fd)
        try:
            if n in self.hold:
                self.entered[n].set()
                assert self.hold[n].wait(timeout=20)
            if n in self.fail:
                raise OSError(errno.EIO, "Input/output error")
            _real_fdatasync(fd)
        finally:
            with self.lock:
                self.in_sync.discard(fd)

    def close(self, fd: int) -> None:
        with self.lock:
            if fd in self.in_sync:
                self.closed_while_synced.append(fd)
        _real_close(fd)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    w = Writes()
    monkeypatch.setattr(os, "write", w)
    return w


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Syncs]:
    s = Syncs()
    monkeypatch.setattr(os, "fdatasync", s)
    monkeypatch.setattr(os, "close", s.close)
    yield s
    for event in s.hold.values():  # a failing test never leaves a thread waiting
        event.set()


def replayed_in(directory: Path) -> dict[int, JournalEntry]:
    """What a journal opened on `directory` (as at the next start) replays, by id."""
    again = Journal.open(directory)
    try:
        return dict(again.replay())
    finally:
        again.close()


def queued(journal: Journal, count: int) -> None:
    """Until `count` appends wait for the leader (it is in a held sync: none of them can be written)."""
    deadline = time.monotonic() + 20
    while journal.queued() < count:
        assert time.monotonic() < deadline, f"{journal.queued()} of {count} appends queued"
        time.sleep(0.001)


def joined(*started: tuple[threading.Thread, Outcome]) -> None:
    for thread, outcome in started:
        thread.join(timeout=20)
        assert not thread.is_alive(), thread.name
        assert outcome.unexpected is None, (thread.name, outcome.unexpected)


# ---- group commit ----------------------------------------------------------------------------------


def test_overlapping_appends_share_one_sync_and_all_get_distinct_ids_that_replay(
    tmp_path: Path, writes: Writes, syncs: Syncs
) -> None:
    journal = Journal.open(tmp_path)
    entered, release_first = syncs.hold_call(1)
    first, first_outcome = appending(journal, 0)
    entered.wait(timeout=20)
    others = [appending(journal, i) for i in range(1, 16)]
    queued(journal, 15)  # all fifteen queued while the first sync was under way
    release_first.set()
    joined((first, first_outcome), *others)
    outcomes = [first_outcome, *(o for _, o in others)]
    assert all(o.error is None for o in outcomes)
    ids = [o.entry_id for o in outcomes]
    assert len(set(ids)) == 16
    assert journal.appended == 16
    assert journal.syncs == 2  # the first append's, then one for the fifteen that waited on it
    journal.close()
    replayed = replayed_in(tmp_path)
    assert replayed == {o.entry_id: entry(i) for i, o in enumerate(outcomes)}


def test_many_threads_appending_at_once_all_replay(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 300)  # rotation under concurrency too
    started = [appending(journal, i) for i in range(40)]
    joined(*started)
    assert all(o.error is None for _, o in started)
    ids = [o.entry_id for _, o in started]
    assert len(set(ids)) == 40
    assert journal.syncs <= journal.appended == 40
    journal.close()
    replayed = replayed_in(tmp_path)
    assert replayed == {o.entry_id: entry(i) for i, (_, o) in enumerate(started)}


# ---- write and sync failures -----------------------------------------------------------------------


def test_a_failed_write_is_an_error_and_later_appends_go_to_a_new_segment(
    tmp_path: Path, writes: Writes, syncs: Syncs
) -> None:
    journal = Journal.open(tmp_path)
    before = [journal.append(entry(i)) for i in range(2)]
    writes.fail_next = True
    with pytest.raises(JournalError):
        journal.append(entry(2))
    after = journal.append(entry(3))
    assert len(list(tmp_path.glob("*" + SUFFIX))) == 2
    journal.close()
    again = Journal.open(tmp_path)
    replayed = again.replay()
    again.close()
    # the torn record ends its segment's replay (set aside); everything acknowledged still replays
    assert replayed == [(before[0], entry(0)), (before[1], entry(1)), (after, entry(3))]
    assert len(list(tmp_path.glob("*" + DAMAGED_SUFFIX))) == 1


def test_a_failed_sync_is_an_error_and_what_was_synced_before_still_replays(
    tmp_path: Path, syncs: Syncs
) -> None:
    journal = Journal.open(tmp_path)
    before = journal.append(entry(0))
    syncs.fail.add(2)
    with pytest.raises(JournalError):
        journal.append(entry(1))
    after = journal.append(entry(2))
    assert len(list(tmp_path.glob("*" + SUFFIX))) == 2  # a new segment after the failure
    journal.close()
    replayed = replayed_in(tmp_path)
    assert replayed[before] == entry(0)
    assert replayed[after] == entry(2)


def test_every_append_waiting_on_a_failed_sync_is_refused_not_acknowledged(
    tmp_path: Path, writes: Writes, syncs: Syncs
) -> None:
    # after a failed fdatasync the kernel may have dropped the pages it could not write, and a later
    # fdatasync succeeds: nobody whose record was in the failed sync may be told it is on disk
    journal = Journal.open(tmp_path)
    entered, release_first = syncs.hold_call(1)
    syncs.fail.add(2)
    first, first_outcome = appending(journal, 0)
    entered.wait(timeout=20)
    waiting = [appending(journal, i) for i in (1, 2, 3)]
    queued(journal, 3)
    release_first.set()  # the first sync succeeds; the second, for the three that waited, fails
    joined((first, first_outcome), *waiting)
    assert first_outcome.error is None
    assert [o.error is not None for _, o in waiting] == [True, True, True]
    later = journal.append(entry(4))  # and the journal goes on
    journal.close()
    replayed = replayed_in(tmp_path)
    assert replayed[first_outcome.entry_id] == entry(0)  # type: ignore[index]
    assert replayed[later] == entry(4)


def test_a_failed_write_does_not_close_the_segment_under_a_sync_in_flight(
    tmp_path: Path, writes: Writes, syncs: Syncs
) -> None:
    journal = Journal.open(tmp_path)
    entered, release_first = syncs.hold_call(1)
    first, first_outcome = appending(journal, 0)
    entered.wait(timeout=20)
    writes.fail_next = True
    failing, failing_outcome = appending(journal, 1)
    failing.join(timeout=0.5)  # a fixed journal waits here for the sync; a broken one closes the fd under it
    release_first.set()
    joined((first, first_outcome), (failing, failing_outcome))
    assert syncs.closed_while_synced == []
    assert first_outcome.error is None
    assert failing_outcome.error is not None
    journal.close()
    replayed = replayed_in(tmp_path)
    assert replayed[first_outcome.entry_id] == entry(0)  # type: ignore[index]


def test_a_segment_that_cannot_be_created_is_a_journal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal.open(tmp_path)
    real_open = os.open

    def full(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(SUFFIX):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", full)
    with pytest.raises(JournalError):
        journal.append(entry(0))
    monkeypatch.setattr(os, "open", real_open)
    kept = journal.append(entry(1))
    journal.close()
    again = Journal.open(tmp_path)
    assert again.replay() == [(kept, entry(1))]
    again.close()


# ---- the directory and its files -------------------------------------------------------------------


def test_the_directory_is_made_0700_and_segments_0600(tmp_path: Path) -> None:
    directory = tmp_path / "deep" / "journal"
    old = os.umask(0)  # a permissive umask must not widen them
    try:
        journal = Journal.open(directory)
        journal.append(entry(0))
    finally:
        os.umask(old)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (segment,) = directory.glob("*" + SUFFIX)
    assert stat.S_IMODE(segment.stat().st_mode) == 0o600
    journal.close()


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777], ids=oct)
def test_a_directory_others_may_write_is_refused_naming_the_fix(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "journal"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(JournalError, match="chmod go-w"):
        Journal.open(directory)


def test_a_directory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "journal"
    link.symlink_to(real)
    with pytest.raises(JournalError, match="link"):
        Journal.open(link)


def test_a_segment_that_is_a_symlink_is_not_followed_at_start(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    source = Journal.open(elsewhere)
    source.append(entry(0))
    source.close()
    (target,) = elsewhere.glob("*" + SUFFIX)
    before = target.read_bytes()
    directory = tmp_path / "journal"
    directory.mkdir(mode=0o700)
    (directory / target.name).symlink_to(target)
    journal = Journal.open(directory)  # one clear error line, not a traceback
    assert journal.replay() == []
    journal.append(entry(1))
    journal.close()
    assert target.read_bytes() == before


def test_a_symlink_where_the_next_segment_goes_is_not_written_through(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    journal = Journal.open(directory)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (directory / f"{1:020d}{SUFFIX}").symlink_to(victim)
    with pytest.raises(JournalError):
        journal.append(entry(0))
    journal.close()
    assert victim.read_bytes() == b"keep"


def test_an_append_failing_other_than_by_io_is_refused_and_later_appends_still_go_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal.open(tmp_path / "j")
    real_write = os.write
    calls = {"n": 0}

    def write_failing_once(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # the first record (the first write is the segment's magic)
            raise MemoryError
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write_failing_once)
    with pytest.raises(JournalError):
        journal.append(entry(1))
    later = appending(journal, 2)  # waited for ever on a lead that was never let go
    joined(later)
    assert later[1].entry_id is not None and later[1].error is None
    journal.close()
    assert [e.body for e in replayed_in(tmp_path / "j").values()] == [entry(2).body]


def test_a_new_segment_is_in_its_synced_directory_before_a_record_in_it_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "j"
    journal = Journal.open(directory, segment_bytes=256)
    real_fsync = os.fsync
    synced_names: list[set[str]] = []  # the segments named in the directory at each of its fsyncs

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced_names.append({p.name for p in directory.glob("*" + SUFFIX)})
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    for i in range(1, 8):  # several segments of 256 bytes
        journal.append(entry(i))
    segments = {p.name for p in directory.glob("*" + SUFFIX)}
    journal.close()
    assert len(segments) > 1
    for name in segments:
        assert any(name in names for names in synced_names), f"{name}'s directory entry never synced"


def test_an_append_queued_while_nobody_leads_leads_itself_and_is_refused_once_closed(tmp_path: Path) -> None:
    # close() took the lead, drained the queue and let go; an append queued between the two finds the lead
    # taken and waits: it must look again and lead itself, not wait for ever.
    journal = Journal.open(tmp_path)
    journal._leader.acquire()  # as close() holds it
    thread, outcome = appending(journal, 0)
    queued(journal, 1)
    journal._closed = True  # close() set it, and drained the queue before this append was queued
    journal._leader.release()
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert isinstance(outcome.error, JournalError)


def test_a_fifo_named_as_a_segment_is_set_aside_not_read_and_the_start_goes_on(tmp_path: Path) -> None:
    # Opened for reading, a FIFO with no writer would block the start for ever.
    fifo = tmp_path / f"{1:020d}{SUFFIX}"
    os.mkfifo(fifo, 0o600)
    journal = Journal.open(tmp_path)
    assert journal.replay() == []
    assert (tmp_path / (fifo.name + DAMAGED_SUFFIX)).exists() and not fifo.exists()
    journal.append(entry(0))
    journal.close()


def test_a_file_longer_than_any_segment_is_set_aside_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fleetguard.controller.journal as journal_module

    source = Journal.open(tmp_path)
    for i in range(40):  # whole records, held: a start would replay them
        source.append(entry(i))
    source.close()
    (big,) = tmp_path.glob("*" + SUFFIX)
    assert big.stat().st_size > 1024
    monkeypatch.setattr(journal_module, "MAX_SEGMENT_FILE_BYTES", 1024)
    journal = Journal.open(tmp_path)
    assert journal.replay() == []  # not read into memory at all
    assert (tmp_path / (big.name + DAMAGED_SUFFIX)).exists()
    journal.close()
