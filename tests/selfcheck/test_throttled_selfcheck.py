"""ThrottledSelfcheck: `up`'s way back does not re-run a failing self-check (GPU and collective tests) on
every 30 s pass; it asks again once SELFCHECK_RECHECK_SECONDS have passed, and a pass is never held back."""

from __future__ import annotations

from fleetguard.actions.slurm_return import SELFCHECK_RECHECK_SECONDS, SelfcheckVerdict, ThrottledSelfcheck
from fleetguard.clock import FakeClock


def test_a_failure_is_repeated_until_the_recheck_time_then_the_check_runs_again() -> None:
    clock = FakeClock(1_800_000_000.0)
    answers = [SelfcheckVerdict(False, "nic mlx5_0 port 1 down"), SelfcheckVerdict(True)]
    runs: list[float] = []

    def run() -> SelfcheckVerdict:
        runs.append(clock.time())
        return answers[min(len(runs) - 1, len(answers) - 1)]

    check = ThrottledSelfcheck(run, clock.time)
    assert check() == SelfcheckVerdict(False, "nic mlx5_0 port 1 down")
    for _ in range(10):  # ten passes of the 30 s loop: the same failure, no new run
        clock.advance(30.0)
        assert check().failure == "nic mlx5_0 port 1 down"
    assert len(runs) == 1
    clock.advance(SELFCHECK_RECHECK_SECONDS)
    assert check().passed
    assert len(runs) == 2


def test_passes_are_not_cached() -> None:
    clock = FakeClock(1_800_000_000.0)
    runs: list[float] = []

    def run() -> SelfcheckVerdict:
        runs.append(clock.time())
        return SelfcheckVerdict(True)

    check = ThrottledSelfcheck(run, clock.time)
    assert check().passed and check().passed
    assert len(runs) == 2
