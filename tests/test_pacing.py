"""The pacer keeps a thread's CPU near its share of the wall clock, rests only once a slice is used, and never
rests past the budget of a piece of work."""

from __future__ import annotations

import pytest

from fleetguard.pacing import Pacer


class _Thread:
    """A thread's CPU clock and its sleeps, in whole milliseconds (exact sums)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def _pacer(thread: _Thread, share: float = 0.25) -> Pacer:
    return Pacer(
        share=share, slice_seconds=4, max_rest_seconds=50, cpu_clock=thread.clock, sleep=thread.sleep
    )


def test_it_rests_three_times_the_work_at_a_quarter_share() -> None:
    thread = _Thread()
    pacer = _pacer(thread)
    pacer.start(budget_seconds=10_000)
    for _ in range(100):
        thread.cpu += 1
        pacer.rest()
    # A slice is 4 ms of CPU: 25 rests of 12 ms, 300 ms for 100 ms of work.
    assert thread.slept == [12] * 25
    assert pacer.rested == 300


def test_no_rest_before_a_slice_is_used() -> None:
    thread = _Thread()
    pacer = _pacer(thread)
    pacer.start(budget_seconds=10_000)
    thread.cpu += 3.9
    pacer.rest()
    assert thread.slept == []


def test_one_rest_is_bounded_whatever_the_slice_took() -> None:
    thread = _Thread()
    pacer = _pacer(thread)
    pacer.start(budget_seconds=10_000)
    thread.cpu += 1000  # one long C call between two pause points
    pacer.rest()
    assert thread.slept == [50]


def test_the_budget_bounds_the_rests_of_one_piece_of_work_and_start_renews_it() -> None:
    thread = _Thread()
    pacer = _pacer(thread)
    pacer.start(budget_seconds=100)
    for _ in range(1000):
        thread.cpu += 4
        pacer.rest()
    assert thread.slept == [12] * 8 + [4]  # then the budget is spent
    pacer.start(budget_seconds=100)
    thread.cpu += 4
    pacer.rest()
    assert thread.slept[-1] == 12


def test_a_pacer_at_full_share_never_rests() -> None:
    thread = _Thread()
    pacer = _pacer(thread, share=1.0)
    pacer.start(budget_seconds=10_000)
    for _ in range(10):
        thread.cpu += 10
        pacer.rest()
    assert sum(thread.slept) == 0


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_its_range_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        Pacer(share=share)


def test_a_real_pacer_keeps_a_busy_thread_near_its_share() -> None:
    import time

    pacer = Pacer(share=0.5)
    pacer.start(budget_seconds=5.0)
    wall0, cpu0 = time.monotonic(), time.thread_time()
    while time.thread_time() - cpu0 < 0.1:
        sum(range(1000))
        pacer.rest()
    wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
    assert pacer.rested > 0.05
    assert wall >= cpu + pacer.rested * 0.9  # it really slept


def test_once_hurried_it_rests_no_more() -> None:
    thread = _Thread()
    pacer = _pacer(thread)
    pacer.start(budget_seconds=10_000)
    pacer.hurry()
    for _ in range(10):
        thread.cpu += 4
        pacer.rest()
    assert thread.slept == []
    assert pacer.rested == 0


def test_hurry_ends_a_rest_under_way_on_another_thread() -> None:
    import threading

    cpu = [0.0]
    pacer = Pacer(slice_seconds=1, max_rest_seconds=10_000, cpu_clock=lambda: cpu[0])
    pacer.start(budget_seconds=10_000)
    cpu[0] = 1.0  # a slice used: the next rest would be 3 s of wall clock
    resting = threading.Thread(target=pacer.rest)
    resting.start()
    pacer.hurry()
    resting.join(timeout=20)
    assert not resting.is_alive()
