"""A damaged journal: a torn tail, a flipped byte, a file that is not a segment. What reads back whole
replays, nothing else does, and the file is kept aside for an operator and never replayed again. `decode`
under arbitrary bytes never raises and never returns a record that was not written whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.controller.journal import (
    DAMAGED_SUFFIX,
    MAGIC,
    SUFFIX,
    Journal,
    JournalEntry,
    decode,
    encode,
)


def entry(i: int, size: int = 24) -> JournalEntry:
    return JournalEntry(f"host-{i}", bytes(range(i, i + size)), i % 2 == 0, 1_700_000_000.5 + i)


def written_segment(directory: Path, count: int) -> tuple[Path, list[tuple[int, JournalEntry]]]:
    """One segment holding `count` entries, abandoned as a crash leaves it."""
    journal = Journal.open(directory)
    written = [(journal.append(entry(i)), entry(i)) for i in range(count)]
    journal.close()
    (segment,) = directory.glob("*" + SUFFIX)
    return segment, written


def test_a_tail_torn_at_every_byte_of_the_last_record_replays_the_whole_records_before_it(
    tmp_path: Path,
) -> None:
    source, written = written_segment(tmp_path / "source", 3)
    data = source.read_bytes()
    last = len(encode(written[-1][0], written[-1][1]))
    start = len(data) - last
    for cut in range(start + 1, len(data)):
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir(mode=0o700)
        (directory / source.name).write_bytes(data[:cut])
        journal = Journal.open(directory)
        assert journal.replay() == written[:-1], cut
        journal.close()
        assert sorted(p.name for p in directory.iterdir()) == [source.name, source.name + DAMAGED_SUFFIX]
        assert (directory / (source.name + DAMAGED_SUFFIX)).read_bytes() == data[:cut]  # kept as it was
        assert (directory / source.name).read_bytes() == data[:start]  # the whole records, and only them
        # a second stop before they were stored: they replay again, the damage does not
        again = Journal.open(directory)
        replayed = again.replay()
        assert replayed == written[:-1], cut
        again.release([entry_id for entry_id, _ in replayed])
        again.close()
        assert [p.name for p in directory.iterdir()] == [source.name + DAMAGED_SUFFIX], cut
        third = Journal.open(directory)
        assert third.replay() == [], cut  # the copy kept aside is never replayed
        third.close()


def test_a_stop_after_the_damaged_copy_was_kept_but_before_the_rewrite_keeps_that_copy(
    tmp_path: Path,
) -> None:
    source, written = written_segment(tmp_path, 3)
    torn = source.read_bytes()[:-3]
    source.write_bytes(torn)
    (tmp_path / (source.name + DAMAGED_SUFFIX)).write_bytes(torn)  # the first step done, then a stop
    journal = Journal.open(tmp_path)
    assert journal.replay() == written[:-1]
    journal.close()
    assert (tmp_path / (source.name + DAMAGED_SUFFIX)).read_bytes() == torn
    again = Journal.open(tmp_path)
    assert again.replay() == written[:-1]
    again.close()


def test_a_flipped_byte_in_a_record_is_caught_and_ends_the_replay_of_its_segment(tmp_path: Path) -> None:
    source, written = written_segment(tmp_path / "source", 3)
    data = source.read_bytes()
    first = len(MAGIC) + len(encode(written[0][0], written[0][1]))
    second_end = first + len(encode(written[1][0], written[1][1]))
    for at in range(first, second_end):  # every byte of the second record, its length and CRC included
        directory = tmp_path / f"flip-{at}"
        directory.mkdir(mode=0o700)
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        (directory / source.name).write_bytes(bytes(flipped))
        journal = Journal.open(directory)
        assert journal.replay() == written[:1], at
        journal.close()
        assert (directory / (source.name + DAMAGED_SUFFIX)).read_bytes() == bytes(flipped), at
        again = Journal.open(directory)
        assert again.replay() == written[:1], at  # still held: the damaged copy is not read again
        again.close()


def test_a_segment_not_starting_with_the_magic_is_set_aside_and_nothing_of_it_replays(tmp_path: Path) -> None:
    source, _ = written_segment(tmp_path / "source", 2)
    data = source.read_bytes()
    directory = tmp_path / "bad"
    directory.mkdir(mode=0o700)
    (directory / source.name).write_bytes(b"FGJRNL2\n" + data[len(MAGIC) :])
    journal = Journal.open(directory)
    assert journal.replay() == []
    kept = journal.append(entry(5))  # the journal goes on beside it
    journal.close()
    assert (directory / (source.name + DAMAGED_SUFFIX)).exists()
    again = Journal.open(directory)
    assert again.replay() == [(kept, entry(5))]
    again.close()


def test_a_second_damaged_segment_never_overwrites_the_first_one_kept_aside(tmp_path: Path) -> None:
    source, _ = written_segment(tmp_path, 1)
    first_damage = source.read_bytes()[:-1]  # its only record torn: nothing replays, no id is learnt
    source.write_bytes(first_damage)
    journal = Journal.open(tmp_path)
    assert journal.replay() == []
    journal.append(entry(7))  # a new segment: it must not take the name of the one set aside
    journal.close()
    (fresh,) = tmp_path.glob("*" + SUFFIX)
    fresh.write_bytes(fresh.read_bytes()[:-1])
    again = Journal.open(tmp_path)
    assert again.replay() == []
    again.close()
    kept = sorted(tmp_path.glob("*" + DAMAGED_SUFFIX))
    assert len(kept) == 2
    assert first_damage in [p.read_bytes() for p in kept]


def test_a_damaged_segment_does_not_make_releases_land_on_another_segment(tmp_path: Path) -> None:
    # segments [1, 2] [3, 4 torn]: the replayed 3 belongs to the damaged file, not to the first segment;
    # releasing it must not count against the first one, or 2 would be deleted while still held
    journal = Journal.open(tmp_path, segment_bytes=len(MAGIC) + 2 * len(encode(1, entry(0))))
    ids = [journal.append(entry(i)) for i in range(4)]
    journal.close()
    second = tmp_path / f"{ids[2]:020d}{SUFFIX}"
    second.write_bytes(second.read_bytes()[:-1])
    again = Journal.open(tmp_path)
    assert [entry_id for entry_id, _ in again.replay()] == ids[:3]
    again.release([ids[0], ids[2]])  # stored: 1 and 3; 2 is still held
    again.close()
    third = Journal.open(tmp_path)
    assert third.replay() == [(ids[0], entry(0)), (ids[1], entry(1))]
    third.close()


# ---- decode under arbitrary bytes ------------------------------------------------------------------

_entries = st.builds(
    JournalEntry,
    host=st.text(max_size=12),
    body=st.binary(max_size=64),
    compressed=st.booleans(),
    received=st.floats(allow_nan=False),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_decode_of_arbitrary_bytes_never_raises_and_returns_only_records_that_encode_back_to_them(
    data: bytes,
) -> None:
    records, end = decode(data)
    assert 0 <= end <= len(data)
    assert b"".join(encode(i, e) for i, e in records) == data[:end]
    assert [i for i, _ in records] == sorted({i for i, _ in records})


@settings(max_examples=200, deadline=None)
@given(st.lists(_entries, min_size=1, max_size=5), st.data())
def test_decode_of_written_records_with_one_byte_changed_returns_only_the_records_before_it(
    entries: list[JournalEntry], draw: st.DataObject
) -> None:
    encoded = [encode(i + 1, e) for i, e in enumerate(entries)]
    data = b"".join(encoded)
    assert decode(data) == ([(i + 1, e) for i, e in enumerate(entries)], len(data))
    at = draw.draw(st.integers(0, len(data) - 1))
    change = draw.draw(st.integers(1, 255))
    damaged = bytearray(data)
    damaged[at] ^= change
    records, end = decode(bytes(damaged))
    whole_before = 0
    while sum(len(r) for r in encoded[: whole_before + 1]) <= at:
        whole_before += 1
    assert records == [(i + 1, e) for i, e in enumerate(entries)][:whole_before]
    assert end == sum(len(r) for r in encoded[:whole_before])


@settings(max_examples=100, deadline=None)
@given(st.lists(_entries, min_size=1, max_size=4), st.binary(min_size=1, max_size=64))
def test_a_segment_of_whole_records_then_garbage_replays_the_records_and_is_set_aside(
    tmp_path_factory: pytest.TempPathFactory, entries: list[JournalEntry], garbage: bytes
) -> None:
    directory = tmp_path_factory.mktemp("journal")
    whole = [(i + 1, e) for i, e in enumerate(entries)]
    data = MAGIC + b"".join(encode(i, e) for i, e in whole)
    segment = directory / f"{1:020d}{SUFFIX}"
    segment.write_bytes(data + garbage)
    journal = Journal.open(directory)
    replayed = journal.replay()
    journal.close()
    assert replayed[: len(whole)] == whole
    # garbage reads as a record only if it carries a CRC over itself and an id past the last: then it is one
    extra = b"".join(encode(i, e) for i, e in replayed[len(whole) :])
    assert garbage.startswith(extra)
    if extra != garbage:  # damaged: a copy kept as it was, the segment left with its whole records only
        assert (directory / (segment.name + DAMAGED_SUFFIX)).read_bytes() == data + garbage
        assert segment.read_bytes() == data + extra
