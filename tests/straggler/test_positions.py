"""A hang without collective reports is placed from where each rank stands: the rank that kept stepping
past its peers' stop, or the one stopped a section ahead of (or behind) all the others; no rank otherwise."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from fleetguard.clock import FakeClock
from fleetguard.records.findings import Finding
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from straggler.analysis import RuntimeAnalyzer
from straggler.positions import AHEAD, BEHIND, RankPosition, position_outliers

JOB = "job-skip"
WORLD = 4


def _beat(a: RuntimeAnalyzer, now: float, rank: int, step: int, section: str = "step") -> None:
    a.observe(
        Heartbeat(
            ts=now, host=f"h{rank}", job_id=JOB, rank=rank, local_rank=rank, world_size=WORLD,
            pid=50 + rank, step=step, section=section,
        ),
        now,
    )  # fmt: skip


def _timing(a: RuntimeAnalyzer, now: float, rank: int, step: int, section: str = "compute") -> None:
    a.observe(StepTiming(ts=now, host=f"h{rank}", job_id=JOB, rank=rank, step=step, section=section,
                         duration_seconds=0.1))  # fmt: skip


def _localised(found: list[Finding]) -> dict[str, object]:
    [f] = [f for f in found if f.kind == "hang_localised"]
    return {"rank": f.rank, **json.loads(f.evidence_json)}


def test_a_rank_that_stops_issuing_collectives_keeps_stepping_and_is_named() -> None:
    clock = FakeClock()
    a = RuntimeAnalyzer()
    a.register_job(JOB, WORLD, clock.time())
    found: list[Finding] = []
    for i in range(60):  # from step 15 rank 2 trains on alone; the others wait in a collective at step 15
        clock.advance(1.0)
        for r in range(WORLD):
            step = i if r == 2 else min(i, 15)
            _beat(a, clock.time(), r, step)
            if r == 2 or i < 15:
                _timing(a, clock.time(), r, step)
        found.extend(a.tick(clock.time()))
    ev = _localised(found)
    assert (ev["rank"], ev["suspect_ranks"], ev["localised_by"]) == (2, [2], "positions")
    assert ev["hang_kind"] == "collective_mismatch" and ev["evict_hardware"] is False
    assert "rank 2" in str(ev["reasoning"]) and "kept stepping" in str(ev["reasoning"])
    assert ev["suspect_hosts"] == {"2": "h2"}


def test_a_rank_stopped_one_section_ahead_of_its_peers_is_named() -> None:
    clock = FakeClock()
    a = RuntimeAnalyzer()
    a.register_job(JOB, WORLD, clock.time())
    found: list[Finding] = []
    for i in range(60):  # at step 15 rank 1 skipped the first collective and finished its compute section
        clock.advance(1.0)
        for r in range(WORLD):
            step = min(i, 15)
            _beat(a, clock.time(), r, step)
            if i < 15 or (r == 1 and i == 15):
                _timing(a, clock.time(), r, step)
        found.extend(a.tick(clock.time()))
    ev = _localised(found)
    assert (ev["rank"], ev["suspect_ranks"], ev["localised_by"]) == (1, [1], "positions")
    assert "skipped" in str(ev["reasoning"])


def test_when_nothing_sets_a_rank_apart_no_rank_is_named() -> None:
    clock = FakeClock()
    a = RuntimeAnalyzer()
    a.register_job(JOB, WORLD, clock.time())
    found: list[Finding] = []
    for i in range(60):  # every rank stops at step 15 in the same place
        clock.advance(1.0)
        for r in range(WORLD):
            _beat(a, clock.time(), r, min(i, 15))
            if i < 15:
                _timing(a, clock.time(), r, i)
        found.extend(a.tick(clock.time()))
    ev = _localised(found)
    assert ev["rank"] is None and ev["suspect_ranks"] == [0, 1, 2, 3] and ev["hang_kind"] == "heartbeat_only"
    assert "localised_by" not in ev


def test_position_outliers_rules() -> None:
    def p(step: int, *done: str, hung: bool = True) -> RankPosition:
        return RankPosition(step, frozenset(done), None, hung)

    behind = position_outliers({0: p(5, "compute"), 1: p(5), 2: p(5, "compute"), 3: p(5, "compute")})
    assert behind is not None and (behind.suspects, behind.direction) == ((1,), BEHIND)
    ahead = position_outliers({0: p(5), 1: p(5), 2: p(5, "compute"), 3: p(5)})
    assert ahead is not None and (ahead.suspects, ahead.direction) == ((2,), AHEAD)
    assert position_outliers({0: p(5), 1: p(5, "compute")}) is None  # one against one
    assert position_outliers({0: p(5), 1: p(5), 2: p(5, "a"), 3: p(5, "a")}) is None  # a tie
    assert position_outliers({0: p(5), 1: p(5, "a"), 2: p(6), 3: p(6)}) is None  # three positions
    # a moving majority is not a culprit: the stopped minority is the one that hangs (named elsewhere)
    assert position_outliers({0: p(5), 1: p(9, hung=False), 2: p(9, hung=False)}) is None
    # peers stopped at the same step but not flagged yet stand with the stopped ones
    early = position_outliers({0: p(5), 1: p(5, hung=False), 2: p(5, hung=False), 3: p(8, hung=False)})
    assert early is not None and (early.suspects, early.direction) == ((3,), AHEAD)


@given(
    st.dictionaries(
        st.integers(0, 63),
        st.tuples(st.integers(0, 5), st.frozensets(st.sampled_from(["a", "b", "c"])), st.booleans()),
        max_size=12,
    )
)
def test_a_named_rank_is_always_a_strict_minority(raw: dict[int, tuple[int, frozenset[str], bool]]) -> None:
    positions = {r: RankPosition(step, done, None, hung) for r, (step, done, hung) in raw.items()}
    verdict = position_outliers(positions)
    if verdict is not None:
        assert verdict.suspects and 2 * len(verdict.suspects) < len(positions)
        assert set(verdict.suspects) <= set(positions)


def test_a_host_stuck_rank_that_never_reported_on_the_stuck_group_is_placed_on_its_host() -> None:
    """Ranks 0-2 wait inside the world group's collective 8; rank 3 never reported on it and then went
    silent. Its host is known from its heartbeats, so the finding names one host to act on."""
    clock = FakeClock()
    a = RuntimeAnalyzer()
    a.register_job(JOB, WORLD, clock.time())
    found: list[Finding] = []
    for i in range(60):
        clock.advance(1.0)
        for r in range(WORLD):
            if r == 3 and i >= 5:
                continue  # rank 3's process stopped: no heartbeat, no report
            _beat(a, clock.time(), r, min(i, 5))
            if r < 3 and i >= 5:
                report = CollectiveProgress(ts=clock.time(), host=f"h{r}", job_id=JOB, rank=r,
                                            process_group="world", last_enqueued=8, last_started=8,
                                            last_completed=7)  # fmt: skip
                a.observe(report, clock.time())
        found.extend(a.tick(clock.time()))
    [f] = [f for f in found if f.kind == "hang_localised"]
    ev = json.loads(f.evidence_json)
    assert ev["suspect_ranks"] == [3] and ev["hang_kind"] == "host_stuck"
    assert ev["suspect_hosts"] == {"3": "h3"} and f.host == "h3"
