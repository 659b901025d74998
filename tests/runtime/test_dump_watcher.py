"""DumpWatcher: each new or rewritten flight-recorder dump is read once; links and hostile pickles skipped."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest

from fleetguard.jobcontrol.trust import job_key
from fleetguard.runtime.dump_watcher import MAX_ERRORS, DumpWatcher

REAL_DUMP = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "nccl_trace_rank_0"


class _RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch /tmp/fleetguard-pwned",))


def test_a_new_dump_is_read_once_into_progress_records_stamped_when_written(tmp_path: Path) -> None:
    watcher = DumpWatcher(tmp_path, host="node1")
    shutil.copy(REAL_DUMP, tmp_path / "nccl_trace_rank_3")
    os.utime(tmp_path / "nccl_trace_rank_3", (1000.0, 1000.0))
    progress = watcher.poll("job-a")
    assert progress and {(p.job_id, p.rank, p.host, p.ts) for p in progress} == {
        ("job-a", 3, "node1", 1000.0)
    }
    assert {p.source for p in progress} == {"flight_recorder"}
    assert watcher.poll("job-a") == []


def test_dumps_already_there_belong_to_earlier_jobs_and_are_not_read(tmp_path: Path) -> None:
    shutil.copy(REAL_DUMP, tmp_path / "nccl_trace_rank_0")
    watcher = DumpWatcher(tmp_path, host="node1")
    assert watcher.poll("job-a") == []


def test_a_rewritten_dump_is_read_again(tmp_path: Path) -> None:
    target = tmp_path / "nccl_trace_rank_0"
    watcher = DumpWatcher(tmp_path, host="node1")
    shutil.copy(REAL_DUMP, target)
    assert watcher.poll("job-a")
    os.utime(target, ns=(1, 1))  # as if a later timeout dumped again
    assert watcher.poll("job-a")


def test_links_fifos_and_hostile_pickles_are_skipped_with_a_reason_and_nothing_runs(tmp_path: Path) -> None:
    watcher = DumpWatcher(tmp_path, host="node1")
    (tmp_path / "nccl_trace_rank_1").symlink_to(REAL_DUMP)
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps(_RunsCode()))
    os.mkfifo(tmp_path / "nccl_trace_rank_4")  # reading it would block the analysis tick
    (tmp_path / "notes.txt").write_text("not a dump")
    assert watcher.poll("job-a") == []
    assert set(watcher.errors) == {str(tmp_path / f"nccl_trace_rank_{r}") for r in (1, 2, 4)}
    assert not Path("/tmp/fleetguard-pwned").exists()


def test_a_missing_directory_is_an_error_not_an_exception(tmp_path: Path) -> None:
    watcher = DumpWatcher(tmp_path / "absent", host="node1")
    assert watcher.poll("job-a") == []
    assert str(tmp_path / "absent") in watcher.errors


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another user")
def test_roots_job_is_credited_only_roots_dumps(tmp_path: Path) -> None:
    # the dump directory is often /tmp: another user's forged dump must not steer a root job's hang
    # localisation (and so its restart, or a cordon of the host)
    watcher = DumpWatcher(tmp_path, host="node1")
    forged = tmp_path / "nccl_trace_rank_0"
    shutil.copy(REAL_DUMP, forged)
    os.chown(forged, 65534, 65534)
    assert watcher.poll(job_key(0, "job-a")) == []
    assert "not by the job's owner 0" in watcher.errors[str(forged)]
    os.chown(forged, 0, 0)
    os.utime(forged, ns=(5, 5))
    assert watcher.poll(job_key(0, "job-a"))


def test_the_skipped_files_remembered_are_bounded(tmp_path: Path) -> None:
    watcher = DumpWatcher(tmp_path, host="node1")
    for r in range(MAX_ERRORS + 50):
        (tmp_path / f"nccl_trace_rank_{r}").symlink_to(REAL_DUMP)
    watcher.poll("job-a")
    assert len(watcher.errors) == MAX_ERRORS
