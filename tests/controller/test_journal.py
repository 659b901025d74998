"""The controller's ingest journal: what is appended replays after a stop or a crash until it is released, a
segment goes once all its entries are released, and damage, I/O errors and a hostile directory are answered
with an error or a file set aside, never a wrong replay."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fleetguard.controller import journal as journal_module
from fleetguard.controller.journal import (
    DAMAGED_SUFFIX,
    MAGIC,
    SUFFIX,
    Journal,
    JournalEntry,
    JournalError,
    JournalFull,
    encode,
)


def entry(i: int, size: int = 40) -> JournalEntry:
    return JournalEntry(f"host-{i}", bytes([i % 256]) * size, i % 2 == 1, 1_700_000_000.0 + i)


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + SUFFIX))


def damaged(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + DAMAGED_SUFFIX))


def record_size(i: int) -> int:
    return len(encode(1, entry(i)))


# ---- append and replay ------------------------------------------------------------------------------


def test_entries_appended_then_closed_replay_in_order_with_increasing_ids(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path)
    written = [(journal.append(entry(i)), entry(i)) for i in range(5)]
    journal.close()
    ids = [entry_id for entry_id, _ in written]
    assert ids == sorted(set(ids))
    again = Journal.open(tmp_path)
    assert again.replay() == written
    assert again.replay() == []  # handed over once
    assert again.held == 5
    again.close()


def test_a_journal_abandoned_without_close_replays_what_it_acknowledged(tmp_path: Path) -> None:
    crashed = Journal.open(tmp_path)
    written = [(crashed.append(entry(i)), entry(i)) for i in range(3)]
    # no close: a controller killed here leaves its open segment as it is
    again = Journal.open(tmp_path)
    assert again.replay() == written
    again.close()
    crashed.close()


def test_released_entries_whose_segment_went_are_not_replayed_and_held_ones_are(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    ids = [journal.append(entry(i)) for i in range(5)]  # segments: [0, 1] [2, 3] [4]
    journal.release([ids[0], ids[1], ids[2]])
    assert journal.held == 2
    journal.close()
    again = Journal.open(tmp_path)
    # release is per segment on disk: a released entry sharing a segment with a held one replays too (the
    # ingest ledger stores it once); what must hold is that every held entry replays and a gone one does not
    assert again.replay() == [(ids[i], entry(i)) for i in (2, 3, 4)]
    again.close()


def test_replay_reads_a_segment_at_a_time_and_never_holds_every_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening reads each segment and lets its bodies go; the replay reads them again one segment at a time,
    as the entries are taken (a journal at its 2 GiB bound must not come back into memory whole)."""
    import fleetguard.controller.journal as journal_module

    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    written = [(journal.append(entry(i)), entry(i)) for i in range(6)]  # segments: [0, 1] [2, 3] [4, 5]
    journal.close()
    again = Journal.open(tmp_path)
    reads: list[str] = []
    real_read = journal_module._read_private

    def counted(path: Path) -> bytes:
        reads.append(path.name)
        return real_read(path)

    monkeypatch.setattr(journal_module, "_read_private", counted)
    replay = again.iter_replay()
    assert reads == []  # nothing read before an entry is asked for
    assert [next(replay), next(replay)] == written[:2]
    assert len(reads) == 1
    assert next(replay) == written[2]
    assert len(reads) == 2
    assert list(replay) == written[3:]
    assert len(reads) == 3
    assert again.replay() == []  # handed over once
    again.close()


def test_a_segment_gone_between_start_and_replay_keeps_the_others_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    written = [(journal.append(entry(i)), entry(i)) for i in range(4)]  # segments: [0, 1] [2, 3]
    journal.close()
    again = Journal.open(tmp_path)
    segments(tmp_path)[0].unlink()  # a disk error since the start, as the replay sees it
    with caplog.at_level("ERROR"):
        assert again.replay() == written[2:]
    assert "cannot be read again" in caplog.text
    assert again.held == 4  # the lost segment's entries were never released: nothing claims them stored
    again.close()


def test_a_replayed_entry_released_is_not_replayed_again(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path)
    ids = [journal.append(entry(i)) for i in range(2)]
    journal.close()
    second = Journal.open(tmp_path)
    assert [entry_id for entry_id, _ in second.replay()] == ids
    second.release(ids)
    second.close()
    assert segments(tmp_path) == []
    third = Journal.open(tmp_path)
    assert third.replay() == []
    third.close()


def test_close_with_everything_released_leaves_no_segment(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, segment_bytes=3 * record_size(0))
    ids = [journal.append(entry(i)) for i in range(7)]
    assert len(segments(tmp_path)) >= 2
    journal.release(ids)
    journal.close()
    assert list(tmp_path.iterdir()) == []


def test_ids_continue_after_replay_and_are_never_reused(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    first = [journal.append(entry(i)) for i in range(3)]
    journal.release(first[:2])  # the first segment goes; the last id left on disk is first[2]
    journal.close()
    again = Journal.open(tmp_path)
    again.replay()
    later = again.append(entry(9))
    assert later > max(first)
    again.close()
    third = Journal.open(tmp_path)
    assert third.replay() == [(first[2], entry(2)), (later, entry(9))]
    third.close()


# ---- segments: rotation and deletion ---------------------------------------------------------------


def test_appends_past_segment_bytes_go_to_a_new_segment_named_by_its_first_id(tmp_path: Path) -> None:
    size = record_size(0)
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * size)
    ids = [journal.append(entry(i)) for i in range(5)]
    names = [p.name for p in segments(tmp_path)]
    assert names == [f"{ids[0]:020d}{SUFFIX}", f"{ids[2]:020d}{SUFFIX}", f"{ids[4]:020d}{SUFFIX}"]
    assert all(p.stat().st_size <= len(MAGIC) + 2 * size for p in segments(tmp_path))
    journal.close()
    again = Journal.open(tmp_path)
    assert again.replay() == [(ids[i], entry(i)) for i in range(5)]
    again.close()


def test_a_segment_is_deleted_once_all_its_entries_are_released_and_it_is_no_longer_open(
    tmp_path: Path,
) -> None:
    size = record_size(0)
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * size)
    ids = [journal.append(entry(i)) for i in range(3)]
    first, open_one = segments(tmp_path)
    journal.release([ids[0]])
    assert first.exists()  # one entry still held
    journal.release([ids[1]])
    assert not first.exists()
    journal.release([ids[2]])
    assert open_one.exists()  # still appended to
    assert journal.held == 0
    journal.close()
    assert not open_one.exists()


def test_bytes_on_disk_follow_the_files_in_a_run_and_after_a_replay(tmp_path: Path) -> None:
    def on_disk() -> int:
        return sum(p.stat().st_size for p in segments(tmp_path))

    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    ids = [journal.append(entry(i)) for i in range(5)]
    assert journal.bytes_on_disk == on_disk()
    journal.release(ids[:2])
    assert journal.bytes_on_disk == on_disk()
    journal.close()
    again = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    assert again.bytes_on_disk == on_disk() > 0  # what a previous run left counts against max_bytes
    again.release([entry_id for entry_id, _ in again.replay()])
    assert again.bytes_on_disk == on_disk() == 0  # never below zero, or max_bytes would stop bounding
    again.close()


def test_appends_past_max_bytes_are_refused_with_journal_full_until_entries_are_released(
    tmp_path: Path,
) -> None:
    size = record_size(0)
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + size, max_bytes=3 * (len(MAGIC) + size))
    ids = [journal.append(entry(i)) for i in range(3)]
    with pytest.raises(JournalFull):
        journal.append(entry(3))
    journal.release(ids[:1])  # its segment is closed and goes: room again
    later = journal.append(entry(3))
    journal.close()
    again = Journal.open(tmp_path)
    assert again.replay() == [(ids[1], entry(1)), (ids[2], entry(2)), (later, entry(3))]
    again.close()


def test_an_entry_too_large_or_not_encodable_is_refused_and_the_journal_goes_on(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path)
    with pytest.raises(JournalError):
        journal.append(JournalEntry("h" * 2000, b"x", False, 0.0))
    with pytest.raises(JournalError):
        journal.append(JournalEntry("\udcff", b"x", False, 0.0))  # a lone surrogate: no UTF-8 for it
    kept = journal.append(entry(1))
    journal.close()
    again = Journal.open(tmp_path)
    assert again.replay() == [(kept, entry(1))]
    again.close()


def test_a_closed_journal_refuses_appends(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path)
    journal.close()
    with pytest.raises(JournalError):
        journal.append(entry(1))


def test_releasing_an_id_the_journal_does_not_hold_changes_nothing(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * record_size(0))
    ids = [journal.append(entry(i)) for i in range(5)]  # segments: [0, 1] [2, 3] [4]
    journal.release([ids[2], ids[3]])  # the middle segment goes
    # again, and ids never given: none may count against the first segment, which still holds both entries
    journal.release([ids[2], ids[3], 0, 10**9])
    journal.release([ids[0]])
    journal.close()
    again = Journal.open(tmp_path)
    assert again.replay() == [(ids[0], entry(0)), (ids[1], entry(1)), (ids[4], entry(4))]
    again.close()


# ---- a previous run's files ------------------------------------------------------------------------


def test_an_empty_segment_left_by_a_stop_is_removed(tmp_path: Path) -> None:
    (tmp_path / f"{7:020d}{SUFFIX}").write_bytes(MAGIC)
    journal = Journal.open(tmp_path)
    assert journal.replay() == []
    assert list(tmp_path.iterdir()) == []
    journal.close()


def test_a_segment_created_but_not_yet_given_its_magic_is_removed_not_set_aside(tmp_path: Path) -> None:
    # a crash between creating a segment and writing its magic: nothing in it was ever acknowledged
    for cut in range(len(MAGIC)):
        (tmp_path / f"{7:020d}{SUFFIX}").write_bytes(MAGIC[:cut])
        journal = Journal.open(tmp_path)
        assert journal.replay() == []
        journal.close()
        assert list(tmp_path.iterdir()) == [], cut


def test_files_that_are_not_segments_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("operator's")
    (tmp_path / f"12{SUFFIX}").write_bytes(b"short name")
    journal = Journal.open(tmp_path)
    assert journal.replay() == []
    journal.append(entry(1))
    journal.close()
    assert (tmp_path / "notes.txt").read_text() == "operator's"
    assert (tmp_path / f"12{SUFFIX}").read_bytes() == b"short name"


def test_append_many_takes_one_sync_for_all_and_a_refusal_takes_none(tmp_path: Path) -> None:
    from fleetguard.controller.journal import REFUSED_SUFFIX, SUFFIX, entries_in

    journal = Journal.open(tmp_path / "j", max_bytes=4096)
    entries = [JournalEntry(f"h{i}", bytes([i]) * 100, True, float(i)) for i in range(5)]
    ids = journal.append_many(entries)
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert journal.syncs == 1 and journal.held == 5
    with pytest.raises(JournalFull):
        journal.append_many([JournalEntry("big", b"x" * 1000, True, 0.0)] * 4)
    assert journal.held == 5, "none of a refused call is held"
    kept = journal.set_aside(ids[0], entries[0], "refused by the store")
    assert kept.name.endswith(SUFFIX + REFUSED_SUFFIX)
    assert [e for _, e in entries_in(tmp_path / "j", SUFFIX + REFUSED_SUFFIX)] == [entries[0]]
    assert journal.held == 4
    journal.close()
    again = Journal.open(tmp_path / "j")
    # The segment still held four: its file, the released entry with them, is read back whole (the writer's
    # ledger makes a stored one a duplicate; a refused one is set aside again).
    assert [i for i, _ in again.replay()] == ids
    again.close()


def test_entries_set_aside_count_in_the_bound_now_and_at_the_next_start(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "j", max_bytes=4096)
    ids = journal.append_many([JournalEntry("h", b"x" * 900, True, 0.0) for _ in range(3)])
    before = journal.bytes_on_disk
    for entry_id in ids:
        journal.set_aside(entry_id, JournalEntry("h", b"x" * 900, True, 0.0), "refused by the store")
    assert journal.bytes_on_disk > before
    with pytest.raises(JournalFull):  # the segment and the three set aside fill the 4 kB bound
        journal.append(JournalEntry("h", b"x" * 900, True, 0.0))
    journal.close()
    again = Journal.open(tmp_path / "j", max_bytes=4096)
    again.replay()
    with pytest.raises(JournalFull):  # still counted after a restart, until an operator removes them
        again.append_many([JournalEntry("h", b"x" * 900, True, 0.0) for _ in range(2)])
    again.close()


def test_an_entry_set_aside_twice_is_counted_in_the_bound_once(tmp_path: Path) -> None:
    # A replayed entry the store refuses again is set aside over the file it had: the same bytes.
    journal = Journal.open(tmp_path / "j")
    entry = JournalEntry("h", b"x" * 500, True, 0.0)
    (entry_id,) = journal.append_many([entry])
    journal.set_aside(entry_id, entry, "refused by the store")
    once = journal.bytes_on_disk
    journal.set_aside(entry_id, entry, "refused again after a replay")
    assert journal.bytes_on_disk == once
    journal.close()


def test_entries_set_aside_are_counted_per_host_across_a_restart_and_an_operators_removal_frees_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal.open(tmp_path / "j")
    entries = [JournalEntry(h, b"x" * 300, True, 0.0) for h in ("a", "a", "b")]
    ids = journal.append_many(entries)
    for entry_id, entry in zip(ids, entries, strict=True):
        journal.set_aside(entry_id, entry, "refused by the store")
    journal.set_aside(ids[0], entries[0], "refused again after a replay")  # the same file: counted once
    assert (journal.set_aside_of("a"), journal.set_aside_of("b"), journal.set_aside_of("c")) == (2, 1, 0)
    journal.close()
    again = Journal.open(tmp_path / "j")
    assert (again.set_aside_of("a"), again.set_aside_of("b")) == (2, 1)
    held = again.bytes_on_disk
    removed = tmp_path / "j" / f"{ids[0]:020d}{SUFFIX}.refused"
    size = removed.stat().st_size
    removed.unlink()  # an operator has looked at it
    monkeypatch.setattr(journal_module, "RECOUNT_SECONDS", 3600.0)
    again.recount_set_aside()  # counted at the start just now: not again within RECOUNT_SECONDS
    assert again.set_aside_of("a") == 2
    monkeypatch.setattr(journal_module, "RECOUNT_SECONDS", 0.0)
    again.recount_set_aside()
    assert (again.set_aside_of("a"), again.set_aside_of("b")) == (1, 1)
    assert held - again.bytes_on_disk == size  # out of the bound as well
    again.close()


def test_files_planted_under_set_aside_names_neither_block_nor_fill_the_bound_nor_hold_a_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory is read at every start and, while a host is held, every RECOUNT_SECONDS: a FIFO must
    not block that read, a link must not be followed, and a file that is not one set-aside entry (a sparse
    10 GiB file, another program's) is not the journal's to count: counted, it alone filled the 2 GiB bound
    and every host's batch was answered 503."""
    directory = tmp_path / "j"
    journal = Journal.open(directory)
    (entry_id,) = journal.append_many([JournalEntry("a", b"x" * 100, True, 0.0)])
    journal.set_aside(entry_id, JournalEntry("a", b"x" * 100, True, 0.0), "refused by the store")
    journal.close()
    (ours,) = directory.glob("*.refused")

    def planted(n: int) -> Path:
        return directory / f"{n:020d}{SUFFIX}.refused"

    os.mkfifo(planted(900))
    os.symlink("/dev/zero", planted(901))
    os.symlink(ours, planted(902))  # a link to a real entry: not followed, so not counted twice
    planted(903).mkdir()
    with planted(904).open("wb") as f:
        f.truncate(10 << 30)  # sparse: 10 GiB long, nothing on disk
    with planted(905).open("wb") as f:  # one of ours by its head, longer than any entry can be
        f.write(ours.read_bytes())
        f.truncate(journal_module.MAX_SEGMENT_FILE_BYTES + 1)
    again = Journal.open(directory)
    assert again.bytes_on_disk == ours.stat().st_size
    assert again.set_aside_by_host == {"a": 1}
    monkeypatch.setattr(journal_module, "RECOUNT_SECONDS", 0.0)
    again.recount_set_aside()
    assert (again.bytes_on_disk, again.set_aside_by_host) == (ours.stat().st_size, {"a": 1})
    assert len(again.append_many([JournalEntry("a", b"y" * 100, True, 0.0)])) == 1  # not full
    again.close()


def test_an_entry_set_aside_over_a_file_planted_under_its_name_is_counted_and_a_fifo_blocks_nothing(
    tmp_path: Path,
) -> None:
    """Setting an entry aside writes `<id>.fgj.refused`. A FIFO there would block a writer's open until some
    reader came (the lane, and with it every set-aside and recount, stuck); a file there that is not one of
    ours (uncounted at the start) must not be taken for the same entry set aside before: it is replaced,
    and the entry counted, in the bound and against its host."""
    journal = Journal.open(tmp_path / "j")
    first, second = journal.append_many([JournalEntry("a", b"x" * 100, True, 0.0) for _ in range(2)])
    fifo = tmp_path / "j" / f"{first:020d}{SUFFIX}.refused"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def set_aside() -> None:
        try:
            journal.set_aside(first, JournalEntry("a", b"x" * 100, True, 0.0), "refused by the store")
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=set_aside, daemon=True)
    writer.start()
    writer.join(10)
    if writer.is_alive():  # let it go before failing: open the FIFO's other end
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(10)
        pytest.fail("setting an entry aside blocked on a FIFO under its name")
    assert [type(e) for e in errors] == [OSError]  # it stays in the journal (the caller logs it)
    assert journal.set_aside_of("a") == 0
    foreign = tmp_path / "j" / f"{second:020d}{SUFFIX}.refused"
    foreign.write_bytes(b"not an entry " * 1000)
    before = journal.bytes_on_disk
    path = journal.set_aside(second, JournalEntry("a", b"x" * 100, True, 0.0), "refused by the store")
    assert journal.bytes_on_disk - before == path.stat().st_size
    assert journal.set_aside_of("a") == 1
    journal.close()


def test_a_recount_reads_only_the_set_aside_files_new_or_changed_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While hosts are held the directory is counted every RECOUNT_SECONDS on the path that accepts batches:
    # hundreds of files set aside must not be opened and read each time.
    journal = Journal.open(tmp_path / "j")
    entries = [JournalEntry(f"h{i % 3}", b"x" * 200, True, 0.0) for i in range(12)]
    for entry_id, one in zip(journal.append_many(entries), entries, strict=True):
        journal.set_aside(entry_id, one, "refused by the store")
    opened: list[str] = []
    real = journal_module._set_aside_file

    def counted(path: Path) -> tuple[str, int] | None:
        opened.append(path.name)
        return real(path)

    monkeypatch.setattr(journal_module, "_set_aside_file", counted)
    monkeypatch.setattr(journal_module, "RECOUNT_SECONDS", 0.0)
    journal.recount_set_aside()
    assert len(opened) == 12  # the first count after the set-asides: every file read once
    journal.recount_set_aside()
    assert len(opened) == 12, "an unchanged file is not read again"
    files = sorted((tmp_path / "j").glob("*.refused"))
    files[0].unlink()
    mtime = files[1].stat().st_mtime_ns
    os.utime(files[1], ns=(mtime, mtime + 10**9))  # changed since (an operator's touch, an edit)
    journal.recount_set_aside()
    assert opened[12:] == [files[1].name]
    assert sum(journal.set_aside_by_host.values()) == 11
    journal.close()
