"""RuntimeAnalyzer: one tick composes heartbeats, stragglers and hang localisation for each job."""

from __future__ import annotations

import json

from fleetguard.clock import FakeClock
from fleetguard.records.findings import Finding
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from straggler.analysis import RuntimeAnalyzer, section_outliers

JOB = "job-1"
WORLD = 4


def feed_step(
    a: RuntimeAnalyzer,
    now: float,
    step: int,
    skip: frozenset[int] | set[int] = frozenset(),
    slow: int | None = None,
) -> None:
    """Every rank (except `skip`) beats, reports a compute timing and completes collective `step`."""
    for r in range(WORLD):
        if r in skip:
            continue
        a.observe(
            Heartbeat(
                ts=now,
                host=f"h{r}",
                job_id=JOB,
                rank=r,
                local_rank=r,
                world_size=WORLD,
                pid=100 + r,
                step=step,
            ),
            now,
        )
        a.observe(
            StepTiming(
                ts=now,
                host=f"h{r}",
                job_id=JOB,
                rank=r,
                step=step,
                section="compute",
                duration_seconds=1.3 if r == slow else 1.0,
            )
        )
        a.observe(
            CollectiveProgress(
                ts=now,
                host=f"h{r}",
                job_id=JOB,
                rank=r,
                process_group="0",
                last_enqueued=step,
                last_started=step,
                last_completed=step,
            )
        )


def run(clock: FakeClock, a: RuntimeAnalyzer, seconds: int, **kw: object) -> list[Finding]:
    out: list[Finding] = []
    for _ in range(seconds):
        clock.advance(1.0)
        feed_step(a, clock.time(), int(clock.time()), **kw)  # type: ignore[arg-type]
        out.extend(a.tick(clock.time()))
    return out


def started(clock: FakeClock) -> RuntimeAnalyzer:
    a = RuntimeAnalyzer()
    a.register_job(JOB, WORLD, clock.time())
    return a


def test_healthy_job_gives_no_findings() -> None:
    clock = FakeClock()
    assert run(clock, started(clock), 300) == []


def test_dead_rank_is_reported_within_one_tick() -> None:
    clock = FakeClock()
    a = started(clock)
    run(clock, a, 30)
    a.process_exited(JOB, 3, exit_code=-9, now=clock.time() + 0.2)
    found = a.tick(clock.time() + 0.2)
    assert [(f.kind, f.rank) for f in found] == [("dead_rank", 3)]


def test_stopped_rank_is_hung_and_localised_to_it() -> None:
    clock = FakeClock()
    a = started(clock)
    run(clock, a, 30)
    clock.advance(0.5)  # rank 2 is SIGSTOPped half-way into the next step: others enqueue, it cannot
    feed_step(a, clock.time(), int(clock.time()) + 1, skip={2})
    found = run(clock, a, 10, skip={2})
    hung = [f for f in found if f.kind == "hung_rank"]
    localised = [f for f in found if f.kind == "hang_localised"]
    assert [f.rank for f in hung] == [2]
    assert len(localised) == 1
    ev = json.loads(localised[0].evidence_json)
    assert (ev["hang_kind"], ev["suspect_ranks"]) == ("host_stuck", [2])


def test_hang_is_localised_once_per_episode() -> None:
    clock = FakeClock()
    a = started(clock)
    run(clock, a, 30)
    found: list[Finding] = []
    for _ in range(30):  # everyone silent: four hung ranks, one localisation
        clock.advance(1.0)
        found.extend(a.tick(clock.time()))
    assert sum(f.kind == "hang_localised" for f in found) == 1
    assert sum(f.kind == "hung_rank" for f in found) == 4


def test_silent_rank_wins_over_stale_progress() -> None:
    clock = FakeClock()
    a = started(clock)
    run(clock, a, 30)
    # rank 1 froze inside collective 31 after starting it: progress alone reads as a network hang
    found: list[Finding] = []
    for _ in range(10):
        clock.advance(1.0)
        now = clock.time()
        for r in range(WORLD):
            a.observe(
                CollectiveProgress(
                    ts=now,
                    host=f"h{r}",
                    job_id=JOB,
                    rank=r,
                    process_group="0",
                    last_enqueued=31,
                    last_started=31,
                    last_completed=30,
                )
            )
            if r != 1:
                a.observe(
                    Heartbeat(
                        ts=now,
                        host=f"h{r}",
                        job_id=JOB,
                        rank=r,
                        local_rank=r,
                        world_size=WORLD,
                        pid=100 + r,
                        step=31,
                    )
                )
        found.extend(a.tick(now))
    ev = json.loads(next(f for f in found if f.kind == "hang_localised").evidence_json)
    assert (ev["hang_kind"], ev["suspect_ranks"]) == ("host_stuck", [1])
    assert ev["progress_diagnosis"]["kind"] == "network"


def test_hang_without_progress_records_names_the_hung_ranks() -> None:
    clock = FakeClock()
    a = started(clock)
    found: list[Finding] = []
    for i in range(30):  # rank 0 keeps beating but its step stops at 5; no collective progress at all
        clock.advance(1.0)
        for r in range(WORLD):
            a.observe(
                Heartbeat(
                    ts=clock.time(),
                    host="h",
                    job_id=JOB,
                    rank=r,
                    local_rank=r,
                    world_size=WORLD,
                    pid=7 + r,
                    step=i if r != 0 else min(i, 5),
                )
            )
        found.extend(a.tick(clock.time()))
    localised = [f for f in found if f.kind == "hang_localised"]
    assert len(localised) == 1
    ev = json.loads(localised[0].evidence_json)
    assert (ev["hang_kind"], ev["suspect_ranks"]) == ("heartbeat_only", [0])


def test_a_hang_without_progress_is_localised_to_the_one_rank_its_section_singles_out() -> None:
    clock = FakeClock()
    a = started(clock)
    found: list[Finding] = []
    for i in range(40):  # from step 6 every rank stops moving: rank 2 inside "compute", the rest at "step"
        clock.advance(1.0)
        for r in range(WORLD):
            stuck_in = "compute" if r == 2 else "step"
            section = stuck_in if i >= 6 else ("compute" if i % 2 else "step")
            a.observe(
                Heartbeat(
                    ts=clock.time(),
                    host="h",
                    job_id=JOB,
                    rank=r,
                    local_rank=r,
                    world_size=WORLD,
                    pid=7 + r,
                    step=min(i, 6),
                    section=section,
                )
            )
        found.extend(a.tick(clock.time()))
    [localised] = [f for f in found if f.kind == "hang_localised"]
    ev = json.loads(localised.evidence_json)
    assert (ev["hang_kind"], ev["suspect_ranks"], ev["localised_by"]) == ("host_stuck", [2], "sections")
    assert localised.rank == 2
    hung = [f.rank for f in found if f.kind == "hung_rank" and f.rank is not None]
    assert sorted(hung) == sorted(set(hung))  # one hung_rank per rank and episode


def test_sections_single_out_ranks_only_when_a_minority_sits_outside_the_step() -> None:
    assert section_outliers({0: "step", 1: "step", 2: "compute", 3: "step"}) == [2]
    assert section_outliers({0: "step", 1: "compute"}) == []  # one against one: nothing singled out
    assert section_outliers({0: "compute", 1: "compute", 2: "step"}) == []  # the odd one waits at the step
    assert section_outliers({0: "step", 1: "step"}) == []


def test_slow_rank_is_flagged_as_straggler_through_the_analyzer() -> None:
    clock = FakeClock()
    a = started(clock)
    found = run(clock, a, 60, slow=1)
    assert [(f.kind, f.rank) for f in found][:1] == [("straggler", 1)]


def test_register_after_restart_drops_old_progress_and_rearms_hang_detection() -> None:
    clock = FakeClock()
    a = started(clock)
    run(clock, a, 30)
    found = []
    for _ in range(10):
        clock.advance(1.0)
        found.extend(a.tick(clock.time()))
    assert any(f.kind == "hang_localised" for f in found)
    a.register_job(JOB, WORLD, clock.time())
    assert run(clock, a, 30) == []


def test_unknown_record_is_counted_and_skipped() -> None:
    a = RuntimeAnalyzer()
    a.observe("not a record", 0.0)  # type: ignore[arg-type]
    assert a.skipped_records == 1


def _hang_of(a: RuntimeAnalyzer, clock: FakeClock, ranks: range, world_size: int) -> dict[str, object]:
    """Ranks `ranks` of a job of `world_size` beat while rank ranks[0]'s step stops: the hang's evidence."""
    found: list[Finding] = []
    for i in range(30):
        clock.advance(1.0)
        for r in ranks:
            hb = Heartbeat(
                ts=clock.time(),
                host="h",
                job_id=JOB,
                rank=r,
                local_rank=r - ranks[0],
                world_size=world_size,
                pid=7 + r,
                step=min(i, 5) if r == ranks[0] else i,
            )
            a.observe(hb)
        found.extend(a.tick(clock.time()))
    [hang] = [f for f in found if f.kind == "hang_localised"]
    evidence = json.loads(hang.evidence_json)
    assert isinstance(evidence, dict)
    return evidence


def test_a_hang_says_whether_its_job_has_ranks_this_analyzer_does_not_see() -> None:
    # node 1 of a two-node job (ranks 2, 3 of 4) is watched here; ranks 0, 1 report to another agent
    assert _hang_of(RuntimeAnalyzer(), FakeClock(), range(2, 4), world_size=4)["spans_hosts"] is True
    assert _hang_of(RuntimeAnalyzer(), FakeClock(), range(4), world_size=4)["spans_hosts"] is False


def test_a_collective_counter_running_ahead_of_time_is_left_out_and_counted() -> None:
    analyzer = RuntimeAnalyzer()
    analyzer.register_job("j", 2, 0.0, local_ranks=range(2))
    analyzer.observe(CollectiveProgress(10.0, "h", "j", 0, "world", 100, 100, 100))
    analyzer.observe(CollectiveProgress(11.0, "h", "j", 0, "world", 10**15, 10**15, 10**15))
    assert analyzer.implausible_records == 1


def test_a_step_running_ahead_of_time_in_one_process_is_left_out_but_a_new_process_starts_afresh() -> None:
    analyzer = RuntimeAnalyzer()
    analyzer.observe(Heartbeat(10.0, "h", "j", 0, 0, 1, 100, step=5))
    analyzer.observe(Heartbeat(11.0, "h", "j", 0, 0, 1, 100, step=10**12))
    assert analyzer.implausible_records == 1
    analyzer.observe(Heartbeat(12.0, "h", "j", 0, 0, 1, 200, step=50_000))  # resumed from a checkpoint
    assert analyzer.implausible_records == 1
