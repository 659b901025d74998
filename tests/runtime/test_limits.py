"""Bounded runtime state: jobs and ranks per uid and in total, idle jobs forgotten, and another user's real
dead rank still found while one user floods the endpoint with fake ranks."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pytest

from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.peer import Sender
from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.findings import Finding
from fleetguard.records.runtime import CollectiveProgress, Heartbeat
from fleetguard.runtime.crashes import CRASH_SETTLE_SECONDS
from fleetguard.runtime.pid_watcher import ProcessExit
from fleetguard.runtime.ranks import LimitExceeded, RankRegistry, RuntimeLimits
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig
from straggler.analysis import MAX_GROUPS_PER_JOB, RuntimeAnalyzer
from tests.runtime.helpers import NOBODY, report_body, root_report, sleeper

FLOOD = 100_000


class Sink:
    def __init__(self) -> None:
        self.records: list[object] = []

    def __call__(self, batch: Sequence[object]) -> None:
        self.records.extend(batch)


@pytest.fixture
def root_rank() -> Iterator[int]:
    proc = sleeper()
    yield proc.pid
    proc.kill()
    proc.wait()


def fake_rank(i: int) -> bytes:
    """Rank i of one of a thousand made-up jobs, as a local user could send it."""
    return json.dumps(
        {"job_id": f"fake-{i % 1000}", "rank": i, "local_rank": 0, "world_size": FLOOD, "pid": 1}
    ).encode()


def test_a_flood_of_fake_ranks_is_held_to_the_uids_share_and_a_real_dead_rank_is_still_found(
    root_rank: int,
) -> None:
    clock, sink = FakeClock(), Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), clock, sink)
    limits = service.config.limits
    nobody = Sender(uid=NOBODY)
    answers = [service.server.handle_body(fake_rank(i), nobody)[0] for i in range(FLOOD)]
    assert answers.count(200) == limits.max_ranks_per_uid
    assert answers.count(429) == FLOOD - limits.max_ranks_per_uid
    assert service.server.stats.reports_over_limit == FLOOD - limits.max_ranks_per_uid
    assert service.ranks.rank_count() == limits.max_ranks_per_uid
    assert len(service.ranks.jobs()) == limits.max_jobs_per_uid
    # root's job is not locked out, and its rank's crash is found in the next tick
    service.handle_report(root_report(report_body(rank=0, local_rank=0, pid=root_rank), clock.time()))
    clock.advance(1.0)
    service.handle_exit(ProcessExit(root_rank, (job_key(0, "job-a"), 0), 1))
    clock.advance(CRASH_SETTLE_SECONDS)  # a plain exit code waits a moment for a peer's own error
    findings = service.tick_once()
    assert [(f.kind, f.job_id, f.rank) for f in findings] == [("dead_rank", job_key(0, "job-a"), 0)]
    service.stop()


def test_a_job_silent_for_the_idle_time_is_forgotten_everywhere() -> None:
    clock, sink = FakeClock(), Sink()
    limits = RuntimeLimits(max_jobs_per_uid=1, max_jobs=2, job_idle_seconds=60.0)
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0, limits=limits), clock, sink)
    nobody = Sender(uid=NOBODY)
    assert service.server.handle_body(report_body(job_id="old"), nobody)[0] == 200
    assert service.server.handle_body(report_body(job_id="new"), nobody)[0] == 429  # one job per uid
    service.commands.push(job_key(NOBODY, "old"), [1], "checkpoint")
    clock.advance(61.0)
    service.tick_once()
    assert service.ranks.jobs() == []
    assert service.commands.pending(job_key(NOBODY, "old"), 1) == []
    assert service.server.handle_body(report_body(job_id="new"), nobody)[0] == 200  # room again
    service.stop()


def test_announced_local_ranks_count_against_the_limit() -> None:
    registry = RankRegistry(RuntimeLimits(max_ranks_per_uid=8, max_ranks=16))
    hb = Heartbeat(ts=1.0, host="h", job_id=job_key(NOBODY, "j"), rank=0, local_rank=0, world_size=64, pid=5)
    with pytest.raises(LimitExceeded, match="more than 8 ranks"):
        registry.update(hb, None, expected_ranks=9)  # LOCAL_WORLD_SIZE=9 would make the analyzer expect 9
    assert registry.update(hb, None, expected_ranks=8)
    assert registry.rank_count() == 8


def test_a_per_uid_limit_above_the_total_is_refused() -> None:
    with pytest.raises(ValueError, match="per-uid"):
        RuntimeLimits(max_ranks_per_uid=10, max_ranks=5)


def test_a_rank_cycling_through_pids_keeps_a_bounded_history() -> None:
    registry = RankRegistry()
    for pid in range(1, 10_001):
        hb = Heartbeat(
            ts=1.0, host="h", job_id=job_key(NOBODY, "j"), rank=0, local_rank=0, world_size=1, pid=pid
        )
        registry.update(hb, None)
    job = registry.job(job_key(NOBODY, "j"))
    assert job is not None and job.restarts == 9_999 and len(job.ranks[0].recent_pids) <= 8


def test_a_job_reporting_endless_process_group_names_keeps_a_bounded_table() -> None:
    analyzer = RuntimeAnalyzer()
    for i in range(MAX_GROUPS_PER_JOB * 10):
        analyzer.observe(CollectiveProgress(1.0, "h", "j", 0, f"group-{i}", 1, 1, 1))
    assert analyzer.skipped_records == MAX_GROUPS_PER_JOB * 9
    diagnosis = analyzer.localise("j")
    assert len(json.dumps(diagnosis.evidence)) < 100_000


def test_findings_of_a_flooded_agent_still_name_real_ranks_only(root_rank: int) -> None:
    clock, sink = FakeClock(), Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), clock, sink)
    for i in range(2_000):
        service.server.handle_body(fake_rank(i), Sender(uid=NOBODY))
    service.handle_report(root_report(report_body(rank=0, local_rank=0, pid=root_rank), clock.time()))
    service.handle_exit(ProcessExit(root_rank, (job_key(0, "job-a"), 0), -9))
    findings = [f for f in service.tick_once() if isinstance(f, Finding) and f.job_id == job_key(0, "job-a")]
    assert [f.kind for f in findings] == ["dead_rank"]
    service.stop()
