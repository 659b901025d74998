"""The spool: durable append, ack deletes, a torn tail is cut off, bounded with drop-oldest counted."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from fleetguard.shipping.spool import Spool, SpoolDirError


def _payloads(spool: Spool) -> list[bytes]:
    out = []
    while (record := spool.oldest()) is not None:
        data = spool.read(record)
        assert data is not None
        out.append(data)
        spool.ack(record.record_id)
    return out


def test_records_come_back_in_order_and_acked_ones_are_gone(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    ids = [spool.append(f"batch {i}".encode()) for i in range(3)]
    assert ids == [1, 2, 3]
    newest = spool.newest()
    assert newest is not None and spool.read(newest) == b"batch 2"
    assert _payloads(spool) == [b"batch 0", b"batch 1", b"batch 2"]
    assert spool.pending() == 0


def test_unacked_records_survive_a_reopen_and_ids_keep_growing(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    first = spool.append(b"a")
    spool.append(b"b")
    spool.ack(first)
    spool.close()
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    assert reopened.pending() == 2  # acks are not persisted: "a" is sent again and the ledger dedups it
    assert reopened.append(b"c") == 3
    assert _payloads(reopened)[-2:] == [b"b", b"c"]


def test_a_torn_tail_is_cut_off_and_counted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(b"whole")
    spool.append(b"torn record")
    spool.close()
    segment = next(tmp_path.glob("seg-*.log"))
    segment.write_bytes(segment.read_bytes()[:-4])
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    assert reopened.stats.corrupt_tails == 1
    assert _payloads(reopened) == [b"whole"]
    assert reopened.append(b"next") == 2  # the torn record's id is free again
    assert _payloads(reopened) == [b"next"]


def test_a_damaged_record_is_not_sent(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    spool.append(b"good")
    spool.append(b"flipped")
    spool.close()
    segment = next(tmp_path.glob("seg-*.log"))
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert _payloads(Spool(tmp_path, max_bytes=1 << 20)) == [b"good"]


def test_past_max_bytes_the_oldest_segments_are_dropped_and_counted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=64 * 1024, segment_bytes=8 * 1024)
    for i in range(40):
        spool.append(bytes([i % 256]) * 4000)
    assert spool.size_bytes() <= 64 * 1024
    assert spool.stats.dropped > 0
    assert spool.pending() + spool.stats.dropped == 40
    oldest = spool.oldest()
    assert oldest is not None and oldest.record_id == spool.stats.dropped + 1


def test_fully_acked_segments_are_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    for _ in range(10):
        spool.append(b"x" * 3000)
    assert len(list(tmp_path.glob("seg-*.log"))) >= 5
    _payloads(spool)
    assert len(list(tmp_path.glob("seg-*.log"))) <= 1


def test_the_spool_directory_is_private(tmp_path: Path) -> None:
    Spool(tmp_path / "spool", max_bytes=1 << 20).append(b"x")
    assert (tmp_path / "spool").stat().st_mode & 0o077 == 0
    assert all(p.stat().st_mode & 0o077 == 0 for p in (tmp_path / "spool").iterdir())


def test_a_planted_segment_link_is_neither_truncated_nor_shipped(tmp_path: Path) -> None:
    # A file the agent (root) must not touch, reached through a link named like a damaged segment.
    victim = tmp_path / "victim"
    victim.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 4)
    spool_dir = tmp_path / "spool"
    Spool(spool_dir, max_bytes=1 << 20).close()
    (spool_dir / "seg-0000000000000001.log").symlink_to(victim)
    spool = Spool(spool_dir, max_bytes=1 << 20)
    assert victim.read_bytes() == b"root:x:0:0:root:/root:/bin/bash\n" * 4
    assert spool.oldest() is None


def test_a_symlinked_spool_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (tmp_path / "spool").symlink_to(elsewhere)
    with pytest.raises(SpoolDirError, match="not a directory of its own"):
        Spool(tmp_path / "spool", max_bytes=1 << 20)
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755  # not chmodded through the link


def test_a_spool_dir_another_user_owns_is_refused_and_their_segments_are_not_shipped(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give files away")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(SpoolDirError, match="owned by uid 65534"):
        Spool(theirs, max_bytes=1 << 20)
    # In the agent's own directory, a segment another user owns (planted while it was open) is skipped.
    mine = tmp_path / "mine"
    Spool(mine, max_bytes=1 << 20).close()
    forged = Spool(tmp_path / "forger", max_bytes=1 << 20)
    forged.append(b"forged batch")
    forged.close()
    planted = mine / "seg-0000000000000001.log"
    planted.write_bytes(next((tmp_path / "forger").glob("seg-*.log")).read_bytes())
    os.chown(planted, 65534, 65534)
    assert Spool(mine, max_bytes=1 << 20).oldest() is None


_DISK_FULL = """
import resource, signal, sys
from pathlib import Path
from fleetguard.shipping.spool import Spool
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit write() fails (EFBIG) or writes short
spool = Spool(Path(sys.argv[1]), max_bytes=1 << 20)
spool.append(b"a" * 1000)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (1500, hard))  # the "disk" fills in the middle of the next record
try:
    spool.append(b"b" * 1000)
except OSError:
    print("refused")
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
spool.append(b"c" * 1000)
spool.close()
"""


def test_a_record_a_full_disk_cut_short_leaves_no_torn_bytes_before_the_next(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _DISK_FULL, str(tmp_path / "spool")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert run.stdout.split() == ["refused"]
    reopened = Spool(tmp_path / "spool", max_bytes=1 << 20)
    assert reopened.stats.corrupt_tails == 0
    assert _payloads(reopened) == [b"a" * 1000, b"c" * 1000]


# ---- damage: every record framed and checksummed, reading resyncs at the next good frame ----------------


def _segment(directory: Path) -> Path:
    (segment,) = directory.glob("seg-*.log")
    return segment


def test_one_flipped_byte_anywhere_loses_exactly_the_record_it_hit(tmp_path: Path) -> None:
    payloads = [f"batch {i}".encode() * (i + 1) for i in range(4)]
    original = tmp_path / "original"
    spool = Spool(original, max_bytes=1 << 20)
    for payload in payloads:
        spool.append(payload)
    spool.close()
    data = _segment(original).read_bytes()
    # where each record's frame (header and payload) lies in the file
    bounds, offset = [], 0
    for payload in payloads:
        bounds.append((offset, offset + 24 + len(payload)))
        offset += 24 + len(payload)
    assert offset == len(data)
    for position in range(len(data)):
        damaged = tmp_path / f"flip-{position}"
        damaged.mkdir()
        segment = damaged / _segment(original).name
        flipped = bytearray(data)
        flipped[position] ^= 0x5A
        segment.write_bytes(bytes(flipped))
        segment.chmod(0o600)
        reopened = Spool(damaged, max_bytes=1 << 20)
        hit = next(i for i, (lo, hi) in enumerate(bounds) if lo <= position < hi)
        assert _payloads(reopened) == payloads[:hit] + payloads[hit + 1 :], position
        assert (reopened.stats.corrupt_records, reopened.stats.corrupt_tails) == (1, 0), position
        reopened.close()
        segment.unlink(missing_ok=True)
        damaged.rmdir()


def test_a_damaged_length_cannot_hide_the_records_after_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(5):
        spool.append(f"record {i}".encode())
    spool.close()
    segment = _segment(tmp_path)
    data = bytearray(segment.read_bytes())
    first_frame = 24 + len(b"record 0")
    data[first_frame + 4 : first_frame + 8] = (1 << 20).to_bytes(4, "little")  # record 1 "spans" the rest
    segment.write_bytes(bytes(data))
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    assert _payloads(reopened) == [b"record 0", b"record 2", b"record 3", b"record 4"]
    assert reopened.stats.corrupt_records == 1
    assert segment.stat().st_size == len(data)  # nothing that checks was cut off


def _v1_frame(record_id: int, payload: bytes) -> bytes:
    """A record as the previous version wrote it: magic FGS1, length, payload CRC, record id."""
    return struct.pack("<4sIIQ", b"FGS1", len(payload), zlib.crc32(payload), record_id) + payload


def test_a_spool_the_previous_version_wrote_is_read_whole_and_appended_to(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o700)
    old = [f"old batch {i}".encode() for i in range(1, 6)]
    segment = spool_dir / "seg-0000000000000001.log"
    segment.write_bytes(b"".join(_v1_frame(i, p) for i, p in enumerate(old, start=1)))
    upgraded = Spool(spool_dir, max_bytes=1 << 20)
    assert upgraded.pending() == 5
    assert upgraded.append(b"new batch") == 6  # appended (new format) after the old records
    upgraded.close()
    reopened = Spool(spool_dir, max_bytes=1 << 20)
    assert _payloads(reopened) == [*old, b"new batch"]
    assert (reopened.stats.corrupt_records, reopened.stats.corrupt_tails) == (0, 0)


def test_damage_in_an_old_format_record_is_resynced_past_too(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o700)
    frames = [_v1_frame(i, f"old {i}".encode()) for i in range(1, 5)]
    data = bytearray(b"".join(frames))
    data[len(frames[0]) + 5] ^= 0xFF  # record 2's length: the old format has no header checksum
    (spool_dir / "seg-0000000000000001.log").write_bytes(bytes(data))
    reopened = Spool(spool_dir, max_bytes=1 << 20)
    assert _payloads(reopened) == [b"old 1", b"old 3", b"old 4"]
    assert reopened.stats.corrupt_records == 1


def test_a_record_damaged_after_it_was_written_is_dropped_at_send_and_counted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    first = spool.append(b"first")
    spool.append(b"second")
    segment = _segment(tmp_path)
    data = bytearray(segment.read_bytes())
    data[24 + 2] ^= 0x01  # inside "first"'s payload, while the spool is open
    segment.write_bytes(bytes(data))
    record = spool.oldest()
    assert record is not None and record.record_id == first
    assert spool.read(record) is None
    assert spool.stats.corrupt_records == 1
    assert _payloads(spool) == [b"second"]


def test_corrupt_records_are_on_the_agents_metrics(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from fleetguard.shipping.agent_side import ShippingMetrics
    from fleetguard.shipping.shipper import Shipper
    from fleetguard.shipping.spool_buffer import SpoolBuffer

    spool = Spool(tmp_path, max_bytes=1 << 20)
    for i in range(3):
        spool.append(f"record {i}".encode())
    spool.close()
    segment = _segment(tmp_path)
    data = bytearray(segment.read_bytes())
    data[30] ^= 0xFF
    segment.write_bytes(bytes(data))
    reopened = Spool(tmp_path, max_bytes=1 << 20)
    registry = CollectorRegistry()
    shipper = Shipper(reopened, "http://127.0.0.1:9", "token", clock=lambda: 0.0)
    registry.register(ShippingMetrics(reopened, SpoolBuffer(reopened, "h", 5.0), shipper))
    text = generate_latest(registry).decode()
    assert "fleetguard_spool_records_corrupt_total 1.0" in text
    assert "fleetguard_spool_batches 2.0" in text


def test_a_spool_dir_under_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give files away")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    (theirs / "spool").mkdir(mode=0o700)  # root's own directory: its parent can still be renamed by them
    with pytest.raises(SpoolDirError, match=r"theirs above it can be changed by another user \(uid 65534"):
        Spool(theirs / "spool", max_bytes=1 << 20)


def test_a_spool_dir_under_a_world_writable_directory_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SpoolDirError, match="above it can be changed by another user"):
        Spool(shared / "spool", max_bytes=1 << 20)
    assert not (shared / "spool").exists() or not any((shared / "spool").iterdir())
