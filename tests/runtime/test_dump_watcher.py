"""DumpWatcher: each new or rewritten flight-recorder dump is read once, in a bounded child off the caller's
thread; links, other users' files and hostile pickles skipped with a counted reason."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.runtime import CollectiveProgress
from fleetguard.runtime.dump_child import DumpRefusal
from fleetguard.runtime.dump_reader import DumpLimits, DumpRequest, read_dump_isolated
from fleetguard.runtime.dump_watcher import MAX_ERRORS, DumpWatcher

REAL_DUMP = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "nccl_trace_rank_0"


class _RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch /tmp/fleetguard-pwned",))


class Watch(Protocol):
    def __call__(self, directory: Path, limits: DumpLimits | None = None) -> DumpWatcher: ...


@pytest.fixture
def watch() -> Iterator[Watch]:
    """DumpWatcher factory; every watcher (its reader thread, a child it runs) is closed after the test."""
    made: list[DumpWatcher] = []

    def make(directory: Path, limits: DumpLimits | None = None) -> DumpWatcher:
        made.append(DumpWatcher(directory, host="node1", limits=limits))
        return made[-1]

    yield make
    for watcher in made:
        watcher.close()


def read(watcher: DumpWatcher, job_id: str) -> list[CollectiveProgress]:
    """What one poll queues, once the reader has read it (the poll after)."""
    progress = watcher.poll(job_id)
    assert watcher.wait_idle(60)
    return progress + watcher.poll(job_id)


def test_a_new_dump_is_read_once_into_progress_records_stamped_when_written(
    tmp_path: Path, watch: Watch
) -> None:
    watcher = watch(tmp_path)
    shutil.copy(REAL_DUMP, tmp_path / "nccl_trace_rank_3")
    os.utime(tmp_path / "nccl_trace_rank_3", (1000.0, 1000.0))
    progress = read(watcher, "job-a")
    assert progress and {(p.job_id, p.rank, p.host, p.ts) for p in progress} == {
        ("job-a", 3, "node1", 1000.0)
    }
    assert {p.source for p in progress} == {"flight_recorder"}
    assert read(watcher, "job-a") == []


def test_dumps_already_there_belong_to_earlier_jobs_and_are_not_read(tmp_path: Path, watch: Watch) -> None:
    shutil.copy(REAL_DUMP, tmp_path / "nccl_trace_rank_0")
    watcher = watch(tmp_path)
    assert read(watcher, "job-a") == []


def test_a_rewritten_dump_is_read_again(tmp_path: Path, watch: Watch) -> None:
    target = tmp_path / "nccl_trace_rank_0"
    watcher = watch(tmp_path)
    shutil.copy(REAL_DUMP, target)
    assert read(watcher, "job-a")
    os.utime(target, ns=(1, 1))  # as if a later timeout dumped again
    assert read(watcher, "job-a")


def test_links_fifos_and_hostile_pickles_are_skipped_with_a_reason_and_nothing_runs(
    tmp_path: Path, watch: Watch
) -> None:
    watcher = watch(tmp_path)
    (tmp_path / "nccl_trace_rank_1").symlink_to(REAL_DUMP)
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps(_RunsCode()))
    os.mkfifo(tmp_path / "nccl_trace_rank_4")  # reading it would block the analysis tick
    (tmp_path / "notes.txt").write_text("not a dump")
    assert read(watcher, "job-a") == []
    assert set(watcher.errors) == {str(tmp_path / f"nccl_trace_rank_{r}") for r in (1, 2, 4)}
    assert not Path("/tmp/fleetguard-pwned").exists()


def test_a_missing_directory_is_an_error_not_an_exception(tmp_path: Path, watch: Watch) -> None:
    watcher = watch(tmp_path / "absent")
    assert read(watcher, "job-a") == []
    assert str(tmp_path / "absent") in watcher.errors


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another user")
def test_roots_job_is_credited_only_roots_dumps(tmp_path: Path, watch: Watch) -> None:
    # the dump directory is often /tmp: another user's forged dump must not steer a root job's hang
    # localisation (and so its restart, or a cordon of the host)
    watcher = watch(tmp_path)
    forged = tmp_path / "nccl_trace_rank_0"
    shutil.copy(REAL_DUMP, forged)
    os.chown(forged, 65534, 65534)
    assert read(watcher, job_key(0, "job-a")) == []
    assert "not by the job's owner 0" in watcher.errors[str(forged)]
    os.chown(forged, 0, 0)
    os.utime(forged, ns=(5, 5))
    assert read(watcher, job_key(0, "job-a"))


def test_the_skipped_files_remembered_are_bounded(tmp_path: Path, watch: Watch) -> None:
    watcher = watch(tmp_path)
    for r in range(MAX_ERRORS + 50):
        (tmp_path / f"nccl_trace_rank_{r}").symlink_to(REAL_DUMP)
    read(watcher, "job-a")
    assert len(watcher.errors) == MAX_ERRORS


# ---- hostile dumps cost a bounded child, never the caller ------------------------------------------------

COLLIDING = (1 << 61) - 1  # every multiple of it hashes to 0: a dict of them is built in quadratic time


def cpu_bomb(keys: int) -> bytes:
    """A small pickle of a dict whose int keys all collide: ~8 s of CPU for 40,000 keys (800 KB), and no
    global, so the plain-data unpickler accepts every opcode of it."""
    out = bytearray(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    for k in range(1, keys + 1):
        key = (k * COLLIDING).to_bytes(16, "little", signed=True)
        out += b"\x8a\x10" + key + b"K\x00"  # LONG1 key, BININT1 0
    return bytes(out + b"u.")  # SETITEMS, STOP


def memory_bomb() -> bytes:
    """10 MB of pickle that unpickles into ~80 MB of int objects."""
    return pickle.dumps({"entries": list(range(100_000, 2_100_000))}, protocol=2)


def test_a_dump_over_the_memory_limit_is_refused_and_counted(tmp_path: Path, watch: Watch) -> None:
    watcher = watch(tmp_path, DumpLimits(memory_bytes=64 << 20))
    (tmp_path / "nccl_trace_rank_0").write_bytes(memory_bomb())
    assert read(watcher, "job-a") == []
    assert watcher.refused == {DumpRefusal.MEMORY_LIMIT: 1}
    assert "memory limit" in watcher.errors[str(tmp_path / "nccl_trace_rank_0")]


def test_a_dump_over_the_cpu_limit_is_refused_while_the_caller_keeps_polling(
    tmp_path: Path, watch: Watch
) -> None:
    watcher = watch(tmp_path, DumpLimits(cpu_seconds=1))
    (tmp_path / "nccl_trace_rank_0").write_bytes(cpu_bomb(40_000))
    assert watcher.poll("job-a") == []
    # the dump is being read by the child: the caller's poll (the agent's tick) answers meanwhile
    assert watcher.reader.busy()
    assert watcher.poll("job-a") == []
    assert watcher.wait_idle(60)
    assert watcher.poll("job-a") == []
    assert watcher.refused == {DumpRefusal.CPU_LIMIT: 1}
    # and the reader is free for the next dump
    shutil.copy(REAL_DUMP, tmp_path / "nccl_trace_rank_1")
    assert {p.rank for p in read(watcher, "job-a")} == {1}


def test_a_dump_past_the_wall_clock_limit_is_killed_and_counted(tmp_path: Path, watch: Watch) -> None:
    watcher = watch(tmp_path, DumpLimits(cpu_seconds=60, wall_seconds=1.0))
    (tmp_path / "nccl_trace_rank_0").write_bytes(cpu_bomb(40_000))
    assert read(watcher, "job-a") == []
    assert watcher.refused == {DumpRefusal.TIMEOUT: 1}


def test_a_dump_over_the_size_limit_is_refused_unread(tmp_path: Path, watch: Watch) -> None:
    watcher = watch(tmp_path, DumpLimits(max_bytes=1000))
    shutil.copy(REAL_DUMP, tmp_path / "nccl_trace_rank_0")
    assert read(watcher, "job-a") == []
    assert watcher.refused == {DumpRefusal.TOO_LARGE: 1}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another user")
def test_a_root_agent_reads_a_users_dump_as_that_user(tmp_path: Path) -> None:
    # a flaw in the unpickler that a dump's bytes could exploit gains the dump's writer nothing
    theirs, ours = tmp_path / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_1"
    shutil.copy(REAL_DUMP, theirs)
    shutil.copy(REAL_DUMP, ours)
    os.chown(theirs, 65534, 65534)
    as_user = read_dump_isolated(DumpRequest(theirs, "node1", "job-a", 0, 65534), DumpLimits())
    as_root = read_dump_isolated(DumpRequest(ours, "node1", "job-b", 1, 0), DumpLimits())
    assert as_root.refusal is None and as_root.progress and as_root.reader_uid == 0
    assert as_user.refusal is None and as_user.progress
    # where uid 65534 may run this interpreter (not from a venv under root's 0700 home), it ran as 65534
    assert as_user.reader_uid == (65534 if _runnable_by(65534) else 0)


def _runnable_by(uid: int) -> bool:
    try:
        done = subprocess.run([sys.executable, "-c", ""], user=uid, group=uid, extra_groups=[], timeout=60)
    except PermissionError:
        return False
    return done.returncode == 0
