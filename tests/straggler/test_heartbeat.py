"""HeartbeatMonitor: dead ranks at once, hung ranks after an adaptive per-section timeout, reported once."""

from __future__ import annotations

import json

import pytest

from fleetguard.records.findings import Finding
from fleetguard.records.runtime import Heartbeat
from straggler.heartbeat import HeartbeatConfig, HeartbeatMonitor

JOB = "job-1"


def hb(rank: int, ts: float, step: int | None = None, section: str | None = None, **kw: object) -> Heartbeat:
    fields: dict[str, object] = {
        "host": f"h{rank // 4}",
        "local_rank": rank % 4,
        "world_size": 4,
        "pid": 1000 + rank,
    }
    fields.update(kw)
    return Heartbeat(ts=ts, job_id=JOB, rank=rank, step=step, section=section, **fields)  # type: ignore[arg-type]


def steady(mon: HeartbeatMonitor, ranks: range, start: float, end: float, period: float = 1.0) -> float:
    """Every rank beats each `period` s from `start` to `end`, one step per beat; returns the last ts."""
    t = start
    step = 0
    while t <= end:
        for r in ranks:
            mon.observe(hb(r, t, step=step), t)
        step += 1
        t += period
    return t - period


def kinds(findings: list[Finding]) -> list[tuple[str, int | None]]:
    return [(f.kind, f.rank) for f in findings]


@pytest.fixture
def mon() -> HeartbeatMonitor:
    m = HeartbeatMonitor(HeartbeatConfig())
    m.register_job(JOB, world_size=4, started_at=0.0, local_ranks=range(4))  # a one-host job
    return m


def test_dead_process_is_a_critical_dead_rank_finding_at_the_next_check(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 10.0)
    mon.process_exited(JOB, 2, exit_code=-9, now=10.2)
    found = mon.check(10.2)
    assert kinds(found) == [("dead_rank", 2)]
    assert found[0].severity == "critical"
    assert json.loads(found[0].evidence_json)["exit_code"] == -9


def test_dead_rank_is_reported_once(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 10.0)
    mon.process_exited(JOB, 2, exit_code=1, now=10.2)
    mon.process_exited(JOB, 2, exit_code=1, now=10.3)
    assert len(mon.check(10.4)) == 1
    assert mon.check(60.0) == []


def test_clean_exit_is_not_a_dead_rank(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 10.0)
    mon.process_exited(JOB, 1, exit_code=0, now=10.2)
    steady(mon, range(0, 4, 2), 11.0, 100.0)  # ranks 0 and 2 go on; 1 and 3 finished cleanly
    mon.process_exited(JOB, 3, exit_code=0, now=10.3)
    assert mon.check(100.0) == []


def test_peers_of_a_dead_rank_are_not_reported_hung(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 10.0)
    mon.process_exited(JOB, 0, exit_code=-9, now=10.5)
    assert kinds(mon.check(10.5)) == [("dead_rank", 0)]
    assert mon.check(100.0) == []


def test_initial_timeout_is_safety_factor_times_time_to_first_heartbeat(mon: HeartbeatMonitor) -> None:
    for r in range(4):  # 4 s to the first heartbeat -> 20 s of silence allowed until a gap is learned
        mon.observe(hb(r, 4.0, step=0), 4.0)
    assert mon.timeout_seconds(JOB) == pytest.approx(20.0)
    assert mon.check(23.9) == []
    assert kinds(mon.check(24.1)) == [("hung_rank", 0), ("hung_rank", 1), ("hung_rank", 2), ("hung_rank", 3)]


def test_steady_timeout_is_safety_factor_times_largest_gap(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 30.0, period=1.0)
    assert mon.timeout_seconds(JOB) == pytest.approx(5.0)


def test_timeout_never_goes_below_the_floor() -> None:
    m = HeartbeatMonitor(HeartbeatConfig(min_timeout_seconds=3.0))
    m.register_job(JOB, 4, 0.0)
    steady(m, range(4), 0.1, 5.0, period=0.1)
    assert m.timeout_seconds(JOB) == pytest.approx(3.0)


def test_a_larger_gap_raises_the_timeout_by_ema(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    mon.observe(hb(0, last + 3.0, step=999), last + 3.0)  # a 3 s gap: target 15 s, EMA from 5 s -> 10 s
    assert mon.timeout_seconds(JOB) == pytest.approx(10.0)


def test_silent_rank_is_hung_after_the_adaptive_timeout_not_before(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    t = last
    while t < last + 10:
        t += 1.0
        for r in (0, 1, 3):
            mon.observe(hb(r, t, step=int(t)), t)
        found = mon.check(t)
        if t - last <= 5.0:
            assert found == [], f"flagged {t - last} s after the last heartbeat"
        else:
            assert kinds(found) == [("hung_rank", 2)]
            assert json.loads(found[0].evidence_json)["cause"] == "silent"
            return
    pytest.fail("rank 2 never flagged")


def test_hung_rank_is_reported_once_until_it_clears(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    assert len(mon.check(last + 6)) == 4
    assert mon.check(last + 7) == []
    assert mon.hung_ranks(JOB) == [0, 1, 2, 3]


def test_hung_rank_that_moves_again_clears_and_can_be_reported_again(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    mon.check(last + 6)
    resume = steady(mon, range(4), last + 7, last + 20)
    assert mon.hung_ranks(JOB) == []
    assert len(mon.check(resume + 6)) == 4


def test_a_hang_does_not_teach_a_longer_timeout(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    mon.check(last + 60)
    steady(mon, range(4), last + 60, last + 70)
    assert mon.timeout_seconds(JOB) == pytest.approx(5.0)


def test_beating_rank_whose_step_does_not_move_is_hung_as_stalled(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    for k in range(1, 9):  # rank 1's background thread keeps beating, its step is stuck
        t = last + k
        for r in range(4):
            mon.observe(hb(r, t, step=500 + k if r != 1 else 28), t)
    found = mon.check(last + 8)
    assert kinds(found) == [("hung_rank", 1)]
    assert json.loads(found[0].evidence_json)["cause"] == "stalled"


def test_long_checkpoint_section_is_not_a_hang(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 30.0)
    for k in range(1, 121):  # two minutes in "checkpoint", beating every second, step unchanged
        t = last + k
        for r in range(4):
            mon.observe(hb(r, t, step=29, section="checkpoint"), t)
        assert mon.check(t) == []


def test_section_timeouts_are_learned_separately(mon: HeartbeatMonitor) -> None:
    t = steady(mon, range(4), 2.0, 30.0)
    for k in range(3):  # three eval passes of 8 s each, announced as they start
        for r in range(4):
            mon.observe(hb(r, t + 0.1, step=100 + k, section="eval"), t + 0.1)
        t += 8.0
        for r in range(4):
            mon.observe(hb(r, t, step=200 + k, section="eval"), t)
    assert mon.timeout_seconds(JOB, "step", kind="stall") == pytest.approx(5.0)
    assert mon.timeout_seconds(JOB, "eval", kind="stall") > 8.0


def test_rank_that_never_sends_a_first_heartbeat_is_hung(mon: HeartbeatMonitor) -> None:
    for t in range(8, 60):  # ranks 0-2 start after 8 s: rank 3 may take 5 x 8 = 40 s
        for r in range(3):
            mon.observe(hb(r, float(t), step=t), float(t))
        if t < 40:
            assert mon.check(float(t)) == []
    found = mon.check(40.5)
    assert kinds(found) == [("hung_rank", 3)]
    assert json.loads(found[0].evidence_json)["cause"] == "no_first_heartbeat"


def test_quick_starters_do_not_make_the_start_up_timeout_tiny(mon: HeartbeatMonitor) -> None:
    for t in range(0, 29):  # ranks 0-2 beat from t=0, as if registered at their first heartbeat
        for r in range(3):
            mon.observe(hb(r, float(t), step=t), float(t))
        assert mon.check(float(t)) == []
    assert kinds(mon.check(30.5)) == [("hung_rank", 3)]


def test_no_heartbeat_from_any_rank_waits_for_the_first_heartbeat_timeout() -> None:
    m = HeartbeatMonitor(HeartbeatConfig(first_heartbeat_timeout_seconds=600.0))
    m.register_job(JOB, 4, 0.0, local_ranks=range(4))
    assert m.check(599.0) == []
    assert len(m.check(601.0)) == 4


def test_error_status_is_a_rank_error_finding(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 10.0)
    mon.observe(hb(3, 11.0, step=11, status="error"), 11.0)
    assert kinds(mon.check(11.0)) == [("rank_error", 3)]


def test_finished_rank_is_never_hung(mon: HeartbeatMonitor) -> None:
    last = steady(mon, range(4), 2.0, 10.0)
    for r in range(4):
        mon.observe(hb(r, last + 1, step=99, status="finished"), last + 1)
    assert mon.check(last + 1000) == []


def test_restarted_rank_clears_dead_and_does_not_learn_the_restart_gap(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 30.0)
    mon.process_exited(JOB, 2, exit_code=-9, now=30.5)
    mon.check(30.5)
    mon.register_job(JOB, world_size=4, started_at=50.0, local_ranks=range(4))  # the group restarted
    steady(mon, range(4), 52.0, 70.0)
    assert mon.timeout_seconds(JOB) == pytest.approx(5.0)
    assert mon.check(70.5) == []


def test_heartbeat_of_unknown_job_registers_it() -> None:
    m = HeartbeatMonitor()
    m.observe(hb(0, 100.0, step=1), 100.0)
    assert m.jobs() == [JOB]


def test_job_seen_first_through_a_heartbeat_gives_late_ranks_the_first_heartbeat_timeout() -> None:
    m = HeartbeatMonitor(HeartbeatConfig(first_heartbeat_timeout_seconds=600.0))
    for t in range(100, 130):
        m.observe(hb(0, float(t), step=t), float(t))
    assert m.check(130.0) == []  # ranks 1-3 have not started yet; nothing says they are late


def test_negative_rank_is_counted_and_skipped(mon: HeartbeatMonitor) -> None:
    mon.observe(hb(-1, 1.0), 1.0)
    assert mon.skipped_records == 1


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="ema_alpha"):
        HeartbeatConfig(ema_alpha=0.0)


def test_ranks_of_a_multi_node_job_on_other_hosts_are_never_reported_missing() -> None:
    m = HeartbeatMonitor()
    m.register_job(JOB, world_size=16, started_at=0.0, local_ranks=range(8, 16))  # this host: node 1 of 2
    for t in range(0, 1000, 1):
        for rank in range(8, 16):
            m.observe(hb(rank, float(t), step=t), now=float(t))
        assert m.check(float(t)) == []


def test_a_long_first_step_after_quick_heartbeats_is_not_a_hang(mon: HeartbeatMonitor) -> None:
    # heartbeats every second from start-up, a first step (step 0) that compiles for 90 s, then 1 s steps
    for t in range(0, 100):
        for rank in range(4):
            mon.observe(hb(rank, float(t), step=None if t < 10 else 0), float(t))
        assert mon.check(float(t)) == []
    steady(mon, range(4), 100.0, 130.0)
    assert mon.check(130.0) == []
    assert mon.timeout_seconds(JOB, kind="stall") < 10.0  # what steps taught, not the start-up


def test_a_rank_that_never_reaches_its_first_step_is_hung_after_the_first_step_timeout(
    mon: HeartbeatMonitor,
) -> None:
    timeout = HeartbeatConfig().first_step_timeout_seconds
    t = 0.0
    found: list[Finding] = []
    while t <= timeout + 5 and not found:
        for rank in range(4):
            mon.observe(hb(rank, t), t)  # alive (the reporter thread beats) but never a step
        found = mon.check(t)
        t += 1.0
    assert {f.rank for f in found} == {0, 1, 2, 3}
    assert all(json.loads(f.evidence_json)["cause"] == "stalled" for f in found)
    assert t > timeout


def test_a_rank_ended_by_sigterm_was_terminated_not_crashed(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 2.0, 10.0)
    for rank in range(4):  # the launcher tears the group down (remote failure, scancel, Ctrl-C)
        mon.process_exited(JOB, rank, exit_code=-15, now=10.5)
    found = mon.check(10.5)
    assert kinds(found) == [("rank_terminated", r) for r in range(4)]
    assert {f.severity for f in found} == {"warning"}
    assert mon.check(100.0) == []  # and the silence that follows is not a hang


def test_the_first_step_after_a_restart_is_start_up_again_not_a_hang(mon: HeartbeatMonitor) -> None:
    steady(mon, range(4), 0.0, 30.0)  # 1 s steps: the stall timeout is a few seconds now
    mon.register_job(JOB, world_size=4, started_at=31.0, local_ranks=range(4))  # torchrun restarted the group
    for t in range(31, 120):  # new pids resume at step 21 and compile for a minute and a half
        for rank in range(4):
            mon.observe(hb(rank, float(t), step=21, pid=2000 + rank), float(t))
        assert mon.check(float(t)) == []


def test_a_rank_stuck_in_the_default_section_gets_the_jobs_learned_timeout_not_the_start_up_one() -> None:
    """Heartbeats sampled mid-step only ever catch the ranks inside "compute": the default section, where
    they wait in collectives, learns nothing of its own. A rank that then stops there (its peer skipped the
    collective) is hung after the job's learned timeout, not after the 600 s allowed for a first step."""
    mon = HeartbeatMonitor(HeartbeatConfig())
    mon.register_job(JOB, world_size=2, started_at=0.0, local_ranks=range(2))
    for r in range(2):
        mon.observe(hb(r, 0.0, step=0, section="compute", world_size=2), 0.0)
    t = 0.0
    for step in range(1, 30):
        t = float(step)
        for r in range(2):
            mon.observe(hb(r, t, step=step, section="compute", world_size=2), t)
    stuck_at = t + 1.0
    mon.observe(hb(0, stuck_at, step=30, section="step", world_size=2), stuck_at)  # into the collective
    found: list[Finding] = []
    for i in range(1, 40):
        now = stuck_at + i
        mon.observe(hb(0, now, step=30, section="step", world_size=2), now)  # its heartbeat thread runs on
        mon.observe(hb(1, now, step=30 + i, section="compute", world_size=2), now)
        found.extend(mon.check(now))
        if found:
            break
    assert kinds(found) == [("hung_rank", 0)]
    waited = json.loads(found[0].evidence_json)["waited_seconds"]
    assert waited < 15.0  # safety x the learned compute interval (1 s), far under 600 s
