"""DumpDirScanner: a dump directory of any size costs each call a bounded number of entries, is listed
again only when it changed, and tracks a bounded number of files per owner."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.jobcontrol.trust import job_key
from fleetguard.runtime.dump_child import DumpRefusal
from fleetguard.runtime.dump_scan import DumpDirScanner
from fleetguard.runtime.dump_watcher import DumpWatcher

PREFIX = "nccl_trace_rank_"
FLOOD = 20_000
REAL_DUMP = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "nccl_trace_rank_0"


def flood(directory: Path, count: int, uid: int | None = None) -> None:
    """`count` empty dump-named files, as a hostile user fills a world-writable dump directory; the
    directory's mtime set in the past, so that only a later change makes it look changed."""
    for r in range(count):
        path = directory / f"{PREFIX}{100_000 + r}"
        path.touch()
        if uid is not None:
            os.chown(path, uid, uid)
    past = time.time() - 60
    os.utime(directory, (past, past))


@pytest.fixture
def scanner(tmp_path: Path) -> Iterator[DumpDirScanner]:
    made = DumpDirScanner(tmp_path, PREFIX, max_entries=4096, max_files_per_owner=64)
    yield made
    made.close()


def test_a_large_directory_is_listed_in_bounded_steps_and_not_again_while_unchanged(
    tmp_path: Path, scanner: DumpDirScanner
) -> None:
    flood(tmp_path, FLOOD)
    calls = 0
    while scanner.passes_completed == 0:
        before = scanner.entries_read
        scanner.scan()
        calls += 1
        assert scanner.entries_read - before <= 4096
    assert calls == -(-FLOOD // 4096) and scanner.entries_read == FLOOD and scanner.listings == 1
    for _ in range(10):  # the directory is unchanged: no listing, no entry read
        assert scanner.scan() == []
    assert scanner.listings == 1 and scanner.entries_read == FLOOD


def test_a_change_to_the_directory_starts_a_new_listing_that_finds_the_new_file(
    tmp_path: Path, scanner: DumpDirScanner
) -> None:
    flood(tmp_path, 100)
    scanner.scan()
    assert scanner.scan() == [] and scanner.listings == 1
    (tmp_path / f"{PREFIX}3").write_bytes(b"x")
    assert f"{PREFIX}3" in {f.name for f in scanner.scan()}
    assert scanner.listings == 2


def test_files_tracked_per_owner_are_capped_and_the_rest_marked(
    tmp_path: Path, scanner: DumpDirScanner
) -> None:
    flood(tmp_path, 100)
    found = scanner.scan()
    assert sum(not f.over_cap for f in found) == 64 and sum(f.over_cap for f in found) == 36
    assert len(scanner.restat(os.geteuid())) == 64  # what a poll looks at again between listings


def test_a_dump_rewritten_in_place_is_seen_by_restat_without_a_listing(
    tmp_path: Path, scanner: DumpDirScanner
) -> None:
    target = tmp_path / f"{PREFIX}0"
    target.write_bytes(b"first")
    flood(tmp_path, 0)
    (first,) = scanner.scan()
    target.write_bytes(b"second dump")  # same name: the directory's mtime does not change
    assert scanner.scan() == []
    (again,) = scanner.restat(os.geteuid())
    assert again.version != first.version and scanner.listings == 1


def test_a_missing_directory_is_an_error_not_an_exception(tmp_path: Path) -> None:
    absent = DumpDirScanner(tmp_path / "absent", PREFIX)
    assert absent.scan() == [] and absent.error is not None and "No such file" in absent.error


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as another user")
def test_another_users_flood_neither_slows_each_poll_nor_hides_the_owners_dump(tmp_path: Path) -> None:
    watcher = DumpWatcher(tmp_path, host="node1", max_entries_per_poll=4096, max_files_per_owner=1024)
    try:
        flood(tmp_path, FLOOD, uid=65534)
        job = job_key(0, "job-a")
        while watcher.scanner.passes_completed < 2:  # the first was the watcher's own, of the empty directory
            before = watcher.scanner.entries_read
            assert watcher.poll(job) == []
            assert watcher.scanner.entries_read - before <= 4096
        listings = watcher.scanner.listings
        for _ in range(5):
            watcher.poll(job)
        assert watcher.scanner.listings == listings  # unchanged directory: no listing per poll
        # the flood's owner is tracked up to its cap (refused as wrong owner), the rest counted over the cap
        assert watcher.refused[DumpRefusal.WRONG_OWNER] == 1024
        assert watcher.refused[DumpRefusal.OWNER_CAP] == FLOOD - 1024
        shutil.copy(REAL_DUMP, tmp_path / f"{PREFIX}2")
        progress = []
        while watcher.scanner.passes_completed < 3:
            progress += watcher.poll(job)
        assert watcher.wait_idle(60)
        progress += watcher.poll(job)
        assert {p.rank for p in progress} == {2}
        # another full listing of the flood: the owner's dump is remembered, not read (and credited) again
        os.utime(tmp_path, (time.time() - 30, time.time() - 30))
        again = []
        while watcher.scanner.passes_completed < 4:
            again += watcher.poll(job)
        assert watcher.wait_idle(60)
        assert again + watcher.poll(job) == []
    finally:
        watcher.close()
