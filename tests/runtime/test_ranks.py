"""The rank registry: restarts are counted from new pids, the checkpoint step only moves forward."""

from __future__ import annotations

from fleetguard.jobcontrol.trust import ProcessIdentity
from fleetguard.records.runtime import Heartbeat
from fleetguard.runtime.ranks import RankRegistry


def hb(rank: int, pid: int, job: str = "j") -> Heartbeat:
    return Heartbeat(ts=1.0, host="h", job_id=job, rank=rank, local_rank=rank, world_size=2, pid=pid)


def own(pid: int) -> ProcessIdentity:
    return ProcessIdentity(pid, 0, 1, pid, 1)


def test_the_first_report_of_a_job_starts_an_incarnation() -> None:
    registry = RankRegistry()
    assert registry.update(hb(0, 10), None, own(10)) is True
    assert registry.update(hb(1, 11), None, own(11)) is False
    assert registry.restarts("j") == 0


def test_a_worker_group_reporting_from_new_pids_is_one_restart() -> None:
    registry = RankRegistry()
    registry.update(hb(0, 10), None, own(10))
    registry.update(hb(1, 11), 20)
    assert registry.update(hb(0, 30), None, own(30)) is True  # first rank of the new group
    assert registry.update(hb(1, 31), None) is False  # same incarnation
    job = registry.job("j")
    assert job is not None
    assert (job.restarts, job.checkpoint_step) == (1, 20)


def test_the_checkpoint_step_never_goes_back() -> None:
    registry = RankRegistry()
    registry.update(hb(0, 10), 40)
    registry.update(hb(1, 11), 30)
    job = registry.job("j")
    assert job is not None and job.checkpoint_step == 40


def test_an_exited_rank_is_no_longer_live() -> None:
    registry = RankRegistry()
    registry.update(hb(0, 10), None, own(10))
    registry.update(hb(1, 11), None, own(11))
    assert registry.mark_exited("j", 1, 11) is not None
    assert registry.live_pids("j") == {0: 10}


def test_an_exit_of_a_superseded_pid_is_ignored() -> None:
    registry = RankRegistry()
    registry.update(hb(0, 10), None, own(10))
    registry.update(hb(0, 30), None, own(30))
    assert registry.mark_exited("j", 0, 10) is None
    assert registry.live_pids("j") == {0: 30}
