"""KmsgFileCollector: parses saved kernel logs in every form and follows what is appended (tail -F)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.file_tail import CHUNK_BYTES, MAX_LINE_BYTES, FileTail, TailResult
from collectors.kmsg import KmsgFileCollector
from collectors.kmsg_classify import AER_CORRECTED, AER_UNCORRECTED_FATAL, AER_UNCORRECTED_NONFATAL
from collectors.protocol import Collector, CollectorUnavailable
from fleetguard.records.telemetry import EventKind

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kmsg"
NOW = 1_800_000_000.0


def fixture_copy(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    shutil.copy(FIXTURES / name, path)
    return path


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc,arg-type]


def test_is_a_collector(tmp_path: Path) -> None:
    assert isinstance(KmsgFileCollector("h", str(fixture_copy(tmp_path, "dmesg_plain.txt"))), Collector)


def test_dmesg_ctime_file_gives_wall_clock_events_with_repeats_folded(tmp_path: Path) -> None:
    collector = KmsgFileCollector("h", str(fixture_copy(tmp_path, "dmesg_ctime.txt")), tz=UTC)
    events = collector.collect(NOW).events
    assert [(e.kind, e.code, e.count, e.ts) for e in events] == [
        (EventKind.XID, 95, 1, utc(2025, 2, 23, 16, 24, 18)),
        (EventKind.PCIE_AER, AER_UNCORRECTED_FATAL, 1, utc(2025, 2, 2, 3, 4, 5)),
        (EventKind.SEGFAULT_CUDA, None, 1, utc(2025, 2, 23, 16, 25, 0)),
        (EventKind.XID, 95, 2, utc(2025, 2, 23, 16, 24, 18)),
    ]
    assert events[3].last_ts == utc(2025, 2, 23, 16, 24, 19)
    assert (events[0].pid, events[0].process_name, events[0].pci_bus_id) == (2210, "python3", "0000:9b:00.0")
    assert collector.problems() == {}


def test_dmesg_iso_file(tmp_path: Path) -> None:
    events = KmsgFileCollector("h", str(fixture_copy(tmp_path, "dmesg_iso.txt"))).collect(NOW).events
    assert [(e.kind, e.code, e.pci_bus_id, e.device) for e in events] == [
        (EventKind.XID, 79, "0000:9b:00.0", None),
        (EventKind.GPU_FALLEN_OFF_BUS, None, "0000:9b:00.0", None),
        (EventKind.NIC_OVER_TEMPERATURE, None, "0000:08:00.0", "ens1f0"),
        (EventKind.PCIE_AER, AER_UNCORRECTED_NONFATAL, "0000:01:00.0", "pcieport 0000:00:01.0"),
    ]
    assert events[0].ts == pytest.approx(utc(2025, 1, 21, 4, 41, 44) + 0.28506)


def test_boot_relative_lines_are_placed_with_boot_time_when_given(tmp_path: Path) -> None:
    path = fixture_copy(tmp_path, "dmesg_plain.txt")
    events = KmsgFileCollector("h", str(path), boot_time=1_000.0).collect(NOW).events
    assert [(e.kind, e.code, e.ts) for e in events] == [
        (EventKind.XID, 31, 1_000.0 + 227.996636),
        (EventKind.PCIE_AER, AER_CORRECTED, 1_000.0 + 228.000001),
        (EventKind.XID, 32, 1_000.0 + 24128.828315),
    ]


def test_boot_relative_lines_without_boot_time_get_now(tmp_path: Path) -> None:
    events = KmsgFileCollector("h", str(fixture_copy(tmp_path, "dmesg_plain.txt"))).collect(NOW).events
    assert {e.ts for e in events} == {NOW}


def test_raw_kmsg_capture_file_keeps_sequence_numbers(tmp_path: Path) -> None:
    events = KmsgFileCollector("h", str(fixture_copy(tmp_path, "kmsg_raw.txt"))).collect(NOW).events
    assert [e.seq for e in events] == [3962, 3964, 3966, 3967, 3968, 3969, 3970, 3971]


def test_lines_appended_later_are_read_on_the_next_collect(tmp_path: Path) -> None:
    path = fixture_copy(tmp_path, "dmesg_plain.txt")
    collector = KmsgFileCollector("h", str(path))
    collector.collect(NOW)
    with path.open("a") as f:
        f.write("[25000.000001] NVRM: Xid (PCI:0000:01:00): 48, pid=1, name=p, DBE\n")
    assert [e.code for e in collector.collect(NOW).events] == [48]
    assert collector.collect(NOW).events == []


def test_a_line_without_its_newline_waits_until_it_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("[1.0] NVRM: Xid (PCI:0000:01:00): 4")
    collector = KmsgFileCollector("h", str(path))
    assert collector.collect(NOW).events == []
    with path.open("a") as f:
        f.write("8, pid=1, name=p, DBE\n")
    assert [e.code for e in collector.collect(NOW).events] == [48]


def test_from_start_false_skips_what_the_file_already_holds(tmp_path: Path) -> None:
    path = fixture_copy(tmp_path, "dmesg_plain.txt")
    collector = KmsgFileCollector("h", str(path), from_start=False)
    assert collector.collect(NOW).events == []


def test_garbage_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"\xff\xfe garbage\n[1.0] NVRM: Xid (PCI:0000:01:00): 13, x\nmore garbage\n")
    collector = KmsgFileCollector("h", str(path))
    assert [e.code for e in collector.collect(NOW).events] == [13]
    assert collector.problems() == {"unknown_format": 2}


def test_rotated_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("[1.0] NVRM: Xid (PCI:0000:01:00): 13, x\n")
    collector = KmsgFileCollector("h", str(path))
    collector.collect(NOW)
    path.rename(tmp_path / "log.1")
    path.write_text("[2.0] NVRM: Xid (PCI:0000:01:00): 31, y\n")
    assert [e.code for e in collector.collect(NOW).events] == [31]


def test_file_removed_after_start_is_counted_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("")
    collector = KmsgFileCollector("h", str(path))
    path.unlink()
    assert collector.collect(NOW).events == []
    assert collector.problems() == {"file_missing": 1}


def test_missing_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(CollectorUnavailable, match="does not exist"):
        KmsgFileCollector("h", str(tmp_path / "nope"))


def test_a_directory_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(CollectorUnavailable):
        KmsgFileCollector("h", str(tmp_path))


def test_a_fifo_is_not_a_file_to_parse(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(CollectorUnavailable, match="not a regular file"):
            KmsgFileCollector("h", str(fifo))
    finally:
        os.close(reader)


def test_file_tail_cuts_overlong_lines_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"x" * (MAX_LINE_BYTES * 3) + b"\nshort\n")
    result = FileTail(str(path)).read()
    assert result.lines[-1] == "short"
    assert all(len(line) <= MAX_LINE_BYTES for line in result.lines)
    assert "line_too_long" in result.problems


def test_file_tail_truncated_in_place_starts_again(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("one\ntwo\n")
    tail = FileTail(str(path))
    assert tail.read().lines == ["one", "two"]
    path.write_text("3\n")
    result = tail.read()
    assert (result.lines, result.rotated) == (["3"], True)


def test_file_tail_streams_a_large_file_chunk_by_chunk(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"0123456789abcde\n" * (3 * CHUNK_BYTES // 16))
    tail = FileTail(str(path))
    lines = tail.follow(TailResult())
    assert next(lines) == "0123456789abcde"
    assert tail.offset == CHUNK_BYTES  # one chunk read, not the whole 3 MiB
    assert sum(1 for _ in lines) == 3 * CHUNK_BYTES // 16 - 1


def test_file_tail_reads_at_most_max_bytes_per_call(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("aaaa\nbbbb\ncccc\n")
    tail = FileTail(str(path), max_bytes_per_read=10)
    assert tail.read().lines == ["aaaa", "bbbb"]
    assert tail.read().lines == ["cccc"]


def test_a_large_saved_log_is_read_in_slices_with_the_backlog_carried(tmp_path: Path) -> None:
    line = (
        "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=7, name=python3, fell off the bus\n"
    )
    path = tmp_path / "dmesg.txt"
    path.write_text(line * 30_000)
    collector = KmsgFileCollector("h", str(path), fold_window_seconds=None, max_bytes_per_collect=512 * 1024)
    slices = []
    while True:
        slices.append(len(collector.collect(NOW).events))
        if not collector.has_backlog:
            break
    assert len(slices) > 1 and max(slices) <= 512 * 1024 // len(line) + 1
    assert sum(slices) == 30_000


def test_file_tail_says_when_it_stopped_with_more_to_read(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("aaaa\nbbbb\ncccc\n")
    tail = FileTail(str(path), max_bytes_per_read=10)
    tail.read()
    assert tail.behind
    tail.read()
    assert not tail.behind
