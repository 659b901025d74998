"""KmsgCollector: follows a /dev/kmsg-like source (a file or FIFO stands in), resumes by sequence number."""

from __future__ import annotations

import errno
import json
import os
import select
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.event_dedup import fold_burst
from collectors.kmsg import KmsgCollector
from collectors.protocol import Collector, CollectorUnavailable
from fleetguard.records.telemetry import Event, EventKind

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kmsg"
BOOT = 1_700_000_000.0
NOW = BOOT + 10_000.0


@pytest.fixture
def boot_id(tmp_path: Path) -> Path:
    path = tmp_path / "boot_id"
    path.write_text("9b1d2c3e-0000-4000-8000-000000000001\n")
    return path


@pytest.fixture
def kmsg(tmp_path: Path) -> Path:
    path = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "kmsg_raw.txt", path)
    return path


def make(path: Path, boot_id: Path, **kwargs: object) -> KmsgCollector:
    return KmsgCollector("node1", str(path), boot_time=BOOT, boot_id_path=str(boot_id), **kwargs)  # type: ignore[arg-type]


def record(seq: int, message: str, usec: int = 300_000_000, prio: int = 4) -> str:
    return f"{prio},{seq},{usec},-;{message}\n"


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def xid_line(code: int = 48) -> str:
    return f"NVRM: Xid (PCI:0000:9b:00): {code}, pid=7, name=python3, An uncorrectable double bit error"


def test_is_a_collector(kmsg: Path, boot_id: Path) -> None:
    assert isinstance(make(kmsg, boot_id), Collector)


def test_reads_every_fault_in_the_ring_buffer_on_first_start(kmsg: Path, boot_id: Path) -> None:
    events = make(kmsg, boot_id).collect(NOW).events
    assert [e.kind for e in events] == [
        EventKind.XID,
        EventKind.PCIE_AER,
        EventKind.SXID,
        EventKind.XID,
        EventKind.SEGFAULT_NCCL,
        EventKind.NIC_INSUFFICIENT_POWER,
        EventKind.NIC_OVER_TEMPERATURE,
        EventKind.GPU_FALLEN_OFF_BUS,
    ]


def test_xid_event_fields_come_from_the_record(kmsg: Path, boot_id: Path) -> None:
    first = make(kmsg, boot_id).collect(NOW).events[0]
    assert first == Event(
        ts=BOOT + 206.764307,
        host="node1",
        kind=EventKind.XID,
        source="kmsg",
        message=(
            "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, "
            "Timeout after 6s of waiting for RPC response from GPU0 GSP! "
            "Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."
        ),
        code=119,
        pci_bus_id="0000:9b:00.0",
        pid=2024380,
        process_name="nvidia-smi",
        seq=3962,
    )


def test_only_records_appended_since_the_last_collect_are_read(kmsg: Path, boot_id: Path) -> None:
    collector = make(kmsg, boot_id)
    collector.collect(NOW)
    append(kmsg, record(3972, xid_line(48)))
    events = collector.collect(NOW + 1).events
    assert [(e.code, e.seq) for e in events] == [(48, 3972)]
    assert collector.collect(NOW + 2).events == []


def test_timestamps_after_now_are_clamped_to_now(kmsg: Path, boot_id: Path) -> None:
    collector = KmsgCollector("node1", str(kmsg), boot_time=NOW, boot_id_path=str(boot_id))
    assert {e.ts for e in collector.collect(NOW).events} == {NOW}


def test_restart_with_state_resumes_after_the_last_committed_sequence(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    state = tmp_path / "var" / "kmsg.seq"
    first = make(kmsg, boot_id, state_path=str(state))
    assert len(first.collect(NOW).events) == 8
    assert first.last_seq == 3971
    first.commit(3971)  # the agent stored those events
    first.close()
    assert json.loads(state.read_text())["seq"] == 3971
    append(kmsg, record(3972, xid_line(48)))
    second = make(kmsg, boot_id, state_path=str(state))
    events = second.collect(NOW + 5).events
    assert [(e.kind, e.code, e.seq) for e in events] == [(EventKind.XID, 48, 3972)]
    assert second.skipped_replayed == 12


def test_records_read_are_not_marked_handled_until_committed(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    state = tmp_path / "kmsg.seq"
    collector = make(kmsg, boot_id, state_path=str(state))
    collector.collect(NOW)
    assert not state.exists()


def test_closing_without_a_commit_leaves_the_records_to_be_read_again(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    state = tmp_path / "kmsg.seq"
    first = make(kmsg, boot_id, state_path=str(state))
    first.collect(NOW)
    first.close()
    assert len(make(kmsg, boot_id, state_path=str(state)).collect(NOW).events) == 8


def test_state_from_another_boot_is_ignored(kmsg: Path, boot_id: Path, tmp_path: Path) -> None:
    state = tmp_path / "kmsg.seq"
    state.write_text(json.dumps({"boot_id": "an-earlier-boot", "seq": 99_999}))
    assert len(make(kmsg, boot_id, state_path=str(state)).collect(NOW).events) == 8


def test_unreadable_state_is_counted_and_reading_starts_from_the_beginning(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    state = tmp_path / "kmsg.seq"
    state.write_text("not json")
    collector = make(kmsg, boot_id, state_path=str(state))
    assert len(collector.collect(NOW).events) == 8
    assert collector.problems()["state_unreadable"] == 1


def test_state_that_cannot_be_written_is_counted_not_raised(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    collector = make(kmsg, boot_id, state_path=str(blocker / "kmsg.seq"))
    assert len(collector.collect(NOW).events) == 8
    collector.commit(3971)
    assert collector.problems()["state_write_error"] == 1


def test_records_overwritten_while_the_agent_was_down_are_counted_as_lost(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    state = tmp_path / "kmsg.seq"
    state.write_text(json.dumps({"boot_id": boot_id.read_text().strip(), "seq": 3900}))
    collector = make(kmsg, boot_id, state_path=str(state))
    collector.collect(NOW)
    assert collector.problems()["records_lost"] == 3960 - 3900 - 1


def test_start_at_end_skips_the_backlog_and_reads_what_follows(kmsg: Path, boot_id: Path) -> None:
    collector = make(kmsg, boot_id, start="end")
    assert collector.collect(NOW).events == []
    append(kmsg, record(3972, xid_line(74)))
    assert [e.code for e in collector.collect(NOW).events] == [74]


def test_start_must_be_beginning_or_end(kmsg: Path, boot_id: Path) -> None:
    with pytest.raises(ValueError, match="start"):
        make(kmsg, boot_id, start="middle")


def test_ring_buffer_overrun_is_counted_and_reading_continues(
    kmsg: Path, boot_id: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_read = os.read
    calls = iter([True])

    def read_with_one_epipe(fd: int, n: int) -> bytes:
        if next(calls, False):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        return real_read(fd, n)

    collector = make(kmsg, boot_id)
    monkeypatch.setattr("collectors.kmsg.os.read", read_with_one_epipe)
    events = collector.collect(NOW).events
    assert collector.problems()["overrun"] == 1
    assert len(events) == 8


def test_garbage_lines_are_counted_by_reason_and_skipped(kmsg: Path, boot_id: Path) -> None:
    append(kmsg, "this is not a kernel record\n6,1,2,Q;bad flags\n" + record(3972, xid_line(79)))
    collector = make(kmsg, boot_id)
    events = collector.collect(NOW).events
    assert events[-1].code == 79
    assert collector.problems() == {"unknown_format": 1, "bad_kmsg_header": 1}


def test_a_burst_of_repeats_in_one_read_is_folded(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_text("".join(record(10 + i, xid_line(95), usec=1_000_000 + i) for i in range(1000)))
    events = make(path, boot_id).collect(NOW).events
    assert [e.count for e in events] == [1, 999]
    assert events[1].last_ts == pytest.approx(BOOT + 1.000999)


def test_folding_can_be_turned_off(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_text("".join(record(10 + i, xid_line(95)) for i in range(5)))
    assert len(make(path, boot_id, fold_window_seconds=None).collect(NOW).events) == 5


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    reader_first = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open does not block
    writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    yield path, writer
    os.close(writer)
    os.close(reader_first)


def test_follows_a_stream_and_is_selectable(fifo: tuple[Path, int], boot_id: Path) -> None:
    path, writer = fifo
    collector = make(path, boot_id)
    readable, _, _ = select.select([collector], [], [], 0)
    assert readable == []
    os.write(writer, record(1, xid_line(119)).encode())
    readable, _, _ = select.select([collector], [], [], 1.0)
    assert readable == [collector]
    assert [e.code for e in collector.collect(NOW).events] == [119]
    assert collector.collect(NOW).events == []  # EAGAIN: nothing more for now


def test_a_record_split_across_reads_is_joined(fifo: tuple[Path, int], boot_id: Path) -> None:
    path, writer = fifo
    collector = make(path, boot_id)
    line = record(1, xid_line(31)).encode()
    os.write(writer, line[:20])
    assert collector.collect(NOW).events == []
    os.write(writer, line[20:])
    assert [e.code for e in collector.collect(NOW).events] == [31]


def test_missing_device_is_unavailable_with_a_one_sentence_reason(tmp_path: Path, boot_id: Path) -> None:
    with pytest.raises(CollectorUnavailable, match=r"does not exist.*--kmsg-file"):
        make(tmp_path / "no-kmsg", boot_id)


def test_permission_denied_is_unavailable_and_says_what_to_do(
    kmsg: Path, boot_id: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def deny(path: str, flags: int) -> int:
        raise PermissionError(errno.EPERM, "Operation not permitted", path)

    monkeypatch.setattr("collectors.kmsg.os.open", deny)
    with pytest.raises(CollectorUnavailable, match="CAP_SYSLOG"):
        make(kmsg, boot_id)


def test_a_log_another_user_could_write_is_refused(kmsg: Path, boot_id: Path, tmp_path: Path) -> None:
    """What another user writes there would be taken for the host's own faults (and a fatal XID drains a
    node): a kernel log writable by others, theirs, or in a folder they can change is not followed."""
    kmsg.chmod(0o666)
    with pytest.raises(CollectorUnavailable, match=r"is writable by others.*collectors.kmsg_path"):
        make(kmsg, boot_id)
    kmsg.chmod(0o620)
    with pytest.raises(CollectorUnavailable, match="is writable by its group"):
        make(kmsg, boot_id)
    kmsg.chmod(0o644)
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    shutil.copy(kmsg, folder / "kmsg")
    with pytest.raises(CollectorUnavailable, match="which other users can write"):
        make(folder / "kmsg", boot_id)
    folder.chmod(0o1777)  # sticky, like /tmp: others may add names, not replace this user's file
    make(folder / "kmsg", boot_id).close()
    if os.geteuid() == 0:
        os.chown(folder / "kmsg", 65534, 65534)
        with pytest.raises(CollectorUnavailable, match="belongs to uid 65534"):
            make(folder / "kmsg", boot_id)


def test_close_releases_the_descriptor(fifo: tuple[Path, int], boot_id: Path) -> None:
    collector = make(fifo[0], boot_id)
    fd = collector.fileno()
    collector.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError):
        collector.fileno()
    assert collector.collect(NOW).events == []


# ---- streams that must not starve the agent ---------------------------------------------------------------


def test_a_fifo_whose_writer_left_is_not_readable_again_until_a_new_writer_writes(
    tmp_path: Path, boot_id: Path
) -> None:
    """A FIFO at EOF selects as readable for ever: without a reopen the agent loop spun on it."""
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    collector = make(path, boot_id)
    writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(writer, record(1, xid_line(79)).encode())
    os.close(writer)  # the writer leaves
    assert [e.code for e in collector.collect(NOW).events] == [79]
    assert select.select([collector], [], [], 0)[0] == []  # EOF seen: nothing to spin on
    assert collector.collect(NOW).events == []
    writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # a new writer is read as before
    os.write(writer, record(2, xid_line(48)).encode())
    assert select.select([collector], [], [], 5.0)[0] == [collector]
    assert [e.code for e in collector.collect(NOW).events] == [48]
    os.close(writer)
    collector.close()


def test_a_regular_file_is_polled_not_selected(kmsg: Path, boot_id: Path) -> None:
    """select() calls a regular file readable even at its end: the agent would spin on it."""
    collector = make(kmsg, boot_id)
    with pytest.raises(ValueError, match="regular file"):
        collector.fileno()
    assert len(collector.collect(NOW).events) == 8
    append(kmsg, record(3972, xid_line(48)))
    assert [e.code for e in collector.collect(NOW + 1).events] == [48]


def test_a_storm_is_read_in_slices_and_the_backlog_carried(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_text("".join(record(1 + i, xid_line(79)) for i in range(12_000)))
    collector = make(path, boot_id, max_lines_per_collect=5_000, fold_window_seconds=None)
    slices = []
    while True:
        events = collector.collect(NOW).events
        slices.append(len(events))
        if not collector.has_backlog:
            break
    assert max(slices) <= 5_000
    assert sum(slices) == 12_000
    assert collector.last_seq == 12_000


def test_lines_without_newlines_cost_budget_too(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(b"x" * (64 * 1024 * 1024))  # 64 MiB without a line end
    collector = make(path, boot_id, max_lines_per_collect=10)
    assert collector.collect(NOW).events == []
    assert collector.has_backlog  # stopped at its budget: 10 reads, not 4,096
    assert collector.problems().get("line_too_long", 0) <= 10


def test_a_sequence_number_past_bigint_is_counted_and_dropped(tmp_path: Path, boot_id: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_text(
        record(2**63, xid_line(79)) + record(99999999999999999999, xid_line(79)) + record(5, xid_line(48))
    )
    collector = make(path, boot_id)
    assert [(e.code, e.seq) for e in collector.collect(NOW).events] == [(48, 5)]
    assert collector.problems()["value_out_of_range"] == 2


# A local user who can write where the state file lives (a relative "var/" under a user's directory, a
# world-writable directory) must not be able to make the root agent write through a link, or feed it a
# sequence number that hides kernel-log records.


def test_a_link_planted_at_the_temporary_file_is_not_written_through(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state = tmp_path / "kmsg.seq"
    (tmp_path / "kmsg.seq.tmp").symlink_to(victim)
    collector = make(kmsg, boot_id, state_path=str(state))
    collector.collect(NOW)
    collector.commit(3971)
    collector.close()
    assert victim.read_text() == "precious\n"
    assert json.loads(state.read_text())["seq"] == 3971 and not state.is_symlink()


def test_a_link_planted_at_the_state_file_is_replaced_not_followed(
    kmsg: Path, boot_id: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text(json.dumps({"boot_id": boot_id.read_text().strip(), "seq": 10**9}))
    state = tmp_path / "kmsg.seq"
    state.symlink_to(victim)
    collector = make(kmsg, boot_id, state_path=str(state))
    assert len(collector.collect(NOW).events) == 8  # the link's "seq" is not believed
    collector.commit(3971)
    collector.close()
    assert json.loads(victim.read_text())["seq"] == 10**9
    assert not state.is_symlink() and json.loads(state.read_text())["seq"] == 3971


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another user")
def test_a_state_file_another_user_wrote_is_not_believed(kmsg: Path, boot_id: Path, tmp_path: Path) -> None:
    state = tmp_path / "kmsg.seq"
    state.write_text(json.dumps({"boot_id": boot_id.read_text().strip(), "seq": 10**9}))
    os.chown(state, 65534, 65534)
    assert len(make(kmsg, boot_id, state_path=str(state)).collect(NOW).events) == 8


def test_a_storm_folds_to_what_the_general_parser_and_fold_burst_give(
    tmp_path: Path, boot_id: Path, kmsg: Path
) -> None:
    """The collector's storm path (raw headers read directly, classification remembered per message,
    repeats counted without an Event each) gives the same events and problem counts as parsing every
    line with parse_kernel_line and folding with fold_burst, over raw records mixed with other lines."""
    lines = (FIXTURES / "kmsg_raw.txt").read_text().splitlines(keepends=True)
    seq = max(int(line.split(",")[1]) for line in lines if line[0].isdigit())
    for i in range(3000):
        seq += 1 if i != 1500 else 40  # a gap: records lost
        message = xid_line(79 if i % 7 else 48).replace("pid=7", f"pid={7 + i // 1000}")
        lines.append(record(seq, message, usec=300_000_000 + 1000 * i))
        if i % 500 == 0:
            lines += [
                record(seq - 3, xid_line()),  # replayed: skipped
                "[  227.996636] NVRM: Xid (PCI:0000:9b:00): 13, pid=1, name=p, Graphics Exception\n",
                "4,1x,2,-;bad header\n",
                " SUBSYSTEM=pci\n",
                record(seq, "sd 0:0:0:0: [sda] Synchronize Cache(10) failed"),
                record(seq + 1, "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal"),
            ]
            seq += 1
    lines.append(record(seq + 1, xid_line(79), usec=300_000_000 + 70_000_000))  # past the window
    (tmp_path / "storm").write_text("".join(lines))
    fast = make(tmp_path / "storm", boot_id, max_lines_per_collect=1_000_000)
    general = make(tmp_path / "storm", boot_id, max_lines_per_collect=1_000_000, fold_window_seconds=None)
    got = fast.collect(NOW).events
    expected = fold_burst(general.collect(NOW).events, 60.0)
    assert got == expected
    assert fast.problems() == general.problems()
    assert fast.problems()["records_lost"] == 39
    in_fixture = sum(e.count for e in make(kmsg, boot_id).collect(NOW).events if e.kind == EventKind.XID)
    xids = sum(e.count for e in got if e.kind == EventKind.XID)
    assert xids == in_fixture + 3000 + 6 + 1  # the storm, the dmesg lines, the late one
    assert len(got) < 20
