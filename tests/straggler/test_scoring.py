"""StragglerDetector: a persistently slow rank is flagged with its cost; noise and job-wide shifts are not."""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable

import pytest

from fleetguard.records.findings import Finding
from fleetguard.records.runtime import StepTiming
from straggler.scoring import StragglerConfig, StragglerDetector

JOB = "job-1"
RANKS = 16


def timing(rank: int, step: int, seconds: float, section: str = "compute", period: float = 1.0) -> StepTiming:
    return StepTiming(
        ts=step * period,
        host=f"h{rank // 8}",
        job_id=JOB,
        rank=rank,
        step=step,
        section=section,
        duration_seconds=seconds,
    )


def run(
    det: StragglerDetector,
    steps: range,
    seconds: Callable[[int, int], float],
    ranks: int = RANKS,
    section: str = "compute",
    period: float = 1.0,
) -> list[tuple[int, Finding]]:
    """One step per `period` simulated seconds: every rank reports, then the detector is checked."""
    out: list[tuple[int, Finding]] = []
    for step in steps:
        for rank in range(ranks):
            det.observe(timing(rank, step, seconds(rank, step), section, period))
        out.extend((step, f) for f in det.check(step * period))
    return out


def slow_rank(
    base: Callable[[int, int], float], rank: int, factor: float, steps: range
) -> Callable[[int, int], float]:
    return lambda r, s: base(r, s) * (factor if r == rank and s in steps else 1.0)


def jitter(seed: int = 0, fraction: float = 0.05) -> Callable[[int, int], float]:
    rng = random.Random(seed)
    return lambda rank, step: 1.0 * (1 + rng.uniform(-fraction, fraction))


def evidence(f: Finding) -> dict[str, object]:
    value = json.loads(f.evidence_json)
    assert isinstance(value, dict)
    return value


def test_window_is_sized_from_the_median_of_the_first_steps() -> None:
    det = StragglerDetector(StragglerConfig(window_seconds=10.0))
    run(det, range(20), lambda r, s: 0.5, period=0.5)
    assert det.window_steps(JOB) == 20


def test_window_is_sized_from_the_step_period_not_the_compute_section_alone() -> None:
    # compute is half of each 0.5 s step (the rest waits in collectives): 10 s is 20 steps, not 40
    det = StragglerDetector(StragglerConfig(window_seconds=10.0))
    run(det, range(20), lambda r, s: 0.25, period=0.5)
    assert det.window_steps(JOB) == 20


def test_healthy_jittery_run_flags_nothing() -> None:
    assert run(StragglerDetector(), range(600), jitter()) == []


def test_one_very_slow_step_flags_nothing() -> None:
    base = jitter(1)
    assert run(StragglerDetector(), range(200), lambda r, s: 5.0 if (r, s) == (3, 100) else base(r, s)) == []


def test_rank_slower_for_fewer_windows_than_the_persistence_is_not_flagged() -> None:
    base = jitter(2)
    slow = range(100, 104)  # one window's worth of steps: it touches two windows at most
    assert run(StragglerDetector(), range(200), slow_rank(base, 5, 1.3, slow)) == []


def test_rank_1_3x_slower_is_flagged_after_persistence() -> None:
    base = jitter(3)
    found = run(
        StragglerDetector(), range(200), lambda r, s: base(r, s) * (1.3 if r == 5 and s >= 100 else 1)
    )
    assert found, "the slow rank was never flagged"
    step, first = found[0]
    assert (first.kind, first.rank) == ("straggler", 5)
    # sliding window of 4 one-second steps scored every step: slow at 5 evaluations in a row, the first
    # once most of the window is slow; so about a window and a half after the slowdown, not three windows
    assert evidence(first)["evaluations_flagged"] == 5
    assert 104 <= step <= 108


def test_straggler_evidence_has_medians_score_z_and_lost_seconds() -> None:
    base = jitter(4)
    _, first = run(
        StragglerDetector(), range(200), lambda r, s: base(r, s) * (1.3 if r == 5 and s >= 100 else 1)
    )[0]
    ev = evidence(first)
    assert float(ev["score"]) < 0.85  # type: ignore[arg-type]
    assert float(ev["z"]) > 4  # type: ignore[arg-type]
    assert "5" in ev["per_rank_median_seconds"]  # type: ignore[operator]
    # ~0.3 s per slow step over the peer median
    slow_steps = int(ev["slow_steps"])  # type: ignore[call-overload]
    assert slow_steps >= int(ev["window_steps"])  # type: ignore[call-overload]
    assert float(ev["lost_seconds"]) == pytest.approx(slow_steps * 0.3, rel=0.2)  # type: ignore[arg-type]


def test_straggler_is_re_reported_with_growing_lost_seconds() -> None:
    cfg = StragglerConfig(report_every_windows=4)
    found = run(StragglerDetector(cfg), range(300), lambda r, s: 1.5 if r == 2 and s >= 50 else 1.0)
    lost = [float(evidence(f)["lost_seconds"]) for _, f in found]  # type: ignore[arg-type]
    assert len(found) > 3
    assert lost == sorted(lost) and lost[-1] > lost[0]
    assert len({f.finding_id for _, f in found}) == len(found)


def test_a_straggler_is_reported_in_the_window_its_cost_first_passes_the_restart_cost() -> None:
    cost = 10.0
    det = StragglerDetector(StragglerConfig(action_cost_seconds=cost))
    found = run(det, range(400), lambda r, s: 1.5 if r == 2 and s >= 50 else 1.0)
    lost = [float(evidence(f)["lost_seconds"]) for _, f in found]  # type: ignore[arg-type]
    over = [x for x in lost if x > cost]
    assert over, lost
    window = det.window_steps(JOB)
    assert window is not None
    # the first report past the cost comes in the very window it was passed: by less than one window's loss
    assert over[0] - cost <= window * 0.5 + 1e-9
    without = run(StragglerDetector(), range(400), lambda r, s: 1.5 if r == 2 and s >= 50 else 1.0)
    periodic = [float(evidence(f)["lost_seconds"]) for _, f in without]  # type: ignore[arg-type]
    assert min(x for x in periodic if x > cost) > over[0]  # the periodic reports alone act later


def test_recovered_straggler_starts_a_new_episode() -> None:
    found = run(
        StragglerDetector(), range(300), lambda r, s: 1.5 if r == 2 and (50 <= s < 100 or s >= 200) else 1.0
    )
    episodes = {evidence(f)["episode_id"] for _, f in found}
    assert len(episodes) == 2


def test_ranks_are_compared_only_within_their_peer_group() -> None:
    # pipeline stage 1 (ranks 8..15) is legitimately 1.5x slower than stage 0: no straggler
    cfg = StragglerConfig(peer_group=lambda rank: "stage0" if rank < 8 else "stage1")
    assert run(StragglerDetector(cfg), range(200), lambda r, s: 1.5 if r >= 8 else 1.0) == []


def test_without_peer_groups_a_slower_stage_looks_like_stragglers() -> None:
    found = run(StragglerDetector(), range(200), lambda r, s: 1.5 if r >= 12 else 1.0)
    assert {f.rank for _, f in found} == {12, 13, 14, 15}


def test_job_wide_20_percent_slowdown_is_job_slowdown_not_straggler() -> None:
    base = jitter(5)
    found = run(StragglerDetector(), range(300), lambda r, s: base(r, s) * (1.2 if s >= 150 else 1))
    assert [f.kind for _, f in found] == ["job_slowdown"]
    assert float(evidence(found[0][1])["shift_fraction"]) == pytest.approx(0.2, abs=0.03)  # type: ignore[arg-type]


def test_job_wide_5_percent_shift_is_not_a_change_point() -> None:
    base = jitter(6)
    assert run(StragglerDetector(), range(300), lambda r, s: base(r, s) * (1.05 if s >= 150 else 1)) == []


def test_job_getting_faster_is_not_a_finding() -> None:
    assert run(StragglerDetector(), range(300), lambda r, s: 0.7 if s >= 150 else 1.0) == []


def test_collective_sections_are_not_scored() -> None:
    # fast ranks wait longer inside all-reduce; that must not make them stragglers
    found = run(StragglerDetector(), range(200), lambda r, s: 3.0 if r == 1 else 1.0, section="allreduce")
    assert found == []


def test_compute_section_wins_over_step_when_a_job_reports_both() -> None:
    det = StragglerDetector()
    found: list[Finding] = []
    for step in range(100):
        for rank in range(RANKS):
            # the whole step is equal everywhere (collectives absorb the difference); compute is not
            det.observe(timing(rank, step, 2.0, section="step"))
            det.observe(timing(rank, step, 1.5 if rank == 7 else 1.0, section="compute"))
        found.extend(det.check(float(step)))
    assert {f.rank for f in found} == {7}
    assert evidence(found[0])["section"] == "compute"


def test_rank_that_stops_reporting_is_not_scored() -> None:
    det = StragglerDetector()
    run(det, range(50), lambda r, s: 1.5 if r == 3 else 1.0)
    found = run(det, range(50, 100), lambda r, s: 1.0, ranks=3)  # rank 3 went silent
    assert all(f.rank != 3 for _, f in found)


def test_job_restarted_from_an_earlier_step_is_scored_again() -> None:
    det = StragglerDetector()
    run(det, range(300), lambda r, s: 1.0)
    found = run(det, range(200, 260), lambda r, s: 1.5 if r == 4 else 1.0)  # resumed from step 200
    assert {f.rank for _, f in found} == {4}


def test_bad_durations_are_counted_and_skipped() -> None:
    det = StragglerDetector()
    det.observe(timing(0, 10, float("nan")))
    det.observe(timing(0, 11, -1.0))
    assert det.skipped_records == 2


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="relative_score_threshold"):
        StragglerConfig(relative_score_threshold=1.5)


@pytest.mark.parametrize("seed", range(3))
def test_window_median_is_the_median_of_the_rank_s_last_window_steps(seed: int) -> None:
    rng = random.Random(seed)
    slow: dict[int, float] = {}
    det = StragglerDetector(StragglerConfig(window_seconds=7.0, min_window_steps=7))

    def seconds(rank: int, step: int) -> float:
        if rank != 0:
            return 1.0
        slow[step] = rng.uniform(2.0, 9.0)  # always slow, never the same twice
        return slow[step]

    found = run(det, range(120), seconds, ranks=8)
    step, f = found[0]
    w = int(evidence(f)["window_steps"])  # type: ignore[call-overload]
    expected = statistics.median(slow[s] for s in range(step - w + 1, step + 1))
    assert evidence(f)["rank_median_seconds"] == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(5))
def test_noisy_steps_of_plus_minus_10_percent_flag_nothing(seed: int) -> None:
    assert run(StragglerDetector(), range(1200), jitter(seed, fraction=0.10)) == []


def tenth(rank: int, step: int) -> float:
    return 0.1  # a 0.1 s step: a 3 s window is 30 steps, scored every 7


def test_slow_burst_shorter_than_a_window_is_not_flagged() -> None:
    slow = range(300, 325)  # 2.5 s of a 1.5x rank in a 3 s window
    assert run(StragglerDetector(), range(600), slow_rank(tenth, 5, 1.5, slow), period=0.1) == []


def test_slow_rank_is_flagged_about_one_and_a_half_windows_after_its_slowdown() -> None:
    det = StragglerDetector()
    found = run(det, range(600), slow_rank(tenth, 5, 1.3, range(300, 600)), period=0.1)
    step, first = found[0]
    w = det.window_steps(JOB)
    assert w == 30 and first.rank == 5
    assert step - 300 <= w + w // 2 + CONFIG_STRIDE_SLACK


def test_rank_slow_from_its_first_step_is_flagged_before_its_window_has_filled_twice() -> None:
    det = StragglerDetector()
    found = run(det, range(200), slow_rank(tenth, 5, 1.3, range(200)), period=0.1)
    step, first = found[0]
    w = det.window_steps(JOB)
    assert w is not None and first.rank == 5
    warm = StragglerConfig().warmup_steps + StragglerConfig().sizing_samples // RANKS + 1
    assert step - warm <= 2 * w


CONFIG_STRIDE_SLACK = 7  # one evaluation stride of a 30-step window
