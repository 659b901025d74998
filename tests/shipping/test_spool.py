"""The spool: durable append, ack deletes, a torn tail is cut off, bounded with drop-oldest counted."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
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
