"""Deltas and rates of cumulative counters: first reading, increase, reset, time that did not move forward."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from collectors.counter_delta import (
    FIRST_READING,
    JUMPED,
    RESET,
    CounterChange,
    CounterTracker,
    counter_change,
)

U64_MAX = 2**64 - 1


def test_an_increase_gives_the_delta_and_the_rate_per_second() -> None:
    assert counter_change(100, 10.0, 130, 20.0) == CounterChange(30, 3.0, False)


def test_an_unchanged_counter_has_zero_delta_and_zero_rate() -> None:
    assert counter_change(7, 0.0, 7, 5.0) == CounterChange(0, 0.0, False)


def test_a_decrease_is_a_reset_with_no_delta_and_no_rate() -> None:
    assert counter_change(1_000, 0.0, 3, 1.0) == RESET
    assert CounterChange(None, None, True) == RESET


def test_no_time_passed_gives_the_delta_but_no_rate() -> None:
    assert counter_change(1, 5.0, 4, 5.0) == CounterChange(3, None, False)


def test_a_clock_stepped_back_gives_the_delta_but_no_rate() -> None:
    assert counter_change(1, 5.0, 4, 3.0) == CounterChange(3, None, False)


def test_the_largest_u64_values_are_exact() -> None:
    assert counter_change(U64_MAX - 10, 0.0, U64_MAX, 1.0).delta == 10


def test_the_first_reading_of_a_counter_has_no_delta() -> None:
    tracker: CounterTracker[str] = CounterTracker()
    assert tracker.update("symbol_error", 5, 0.0) == FIRST_READING
    assert CounterChange(None, None, False) == FIRST_READING


def test_the_tracker_measures_each_counter_from_its_own_previous_reading() -> None:
    tracker: CounterTracker[str] = CounterTracker()
    tracker.update("a", 10, 0.0)
    tracker.update("b", 1_000, 0.0)
    assert tracker.update("a", 20, 2.0) == CounterChange(10, 5.0, False)
    assert tracker.update("b", 1_000, 4.0) == CounterChange(0, 0.0, False)


def test_after_a_reset_the_next_reading_is_measured_from_the_value_at_the_reset() -> None:
    tracker: CounterTracker[str] = CounterTracker()
    tracker.update("c", 500, 0.0)
    assert tracker.update("c", 2, 1.0).reset
    assert tracker.update("c", 12, 3.0) == CounterChange(10, 5.0, False)


def test_retain_forgets_counters_that_vanished() -> None:
    tracker: CounterTracker[str] = CounterTracker()
    tracker.update("kept", 1, 0.0)
    tracker.update("gone", 1, 0.0)
    tracker.retain({"kept"})
    assert len(tracker) == 1
    assert tracker.update("gone", 5, 1.0) == FIRST_READING
    assert tracker.update("kept", 5, 1.0).delta == 4


readings = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=U64_MAX),
        st.floats(min_value=-5.0, max_value=1e6, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=50,
)


@given(readings)
def test_delta_and_rate_are_never_negative_and_a_reset_is_exactly_a_decrease_or_a_jump(
    steps: list[tuple[int, float]],
) -> None:
    tracker: CounterTracker[str] = CounterTracker()
    ts = 0.0
    previous: int | None = None
    for value, step in steps:
        ts += step
        change = tracker.update("x", value, ts)
        if previous is None:
            assert change == FIRST_READING
        else:
            assert change.reset == (value < previous or value - previous > 2**63 - 1)
            assert change.jumped == (value - previous > 2**63 - 1)
            if change.reset:
                assert (change.delta, change.rate_per_second) == (None, None)
            else:
                assert change.delta == value - previous
        assert change.delta is None or change.delta >= 0
        assert change.rate_per_second is None or change.rate_per_second >= 0
        previous = value


@given(st.lists(st.integers(min_value=0, max_value=10**12), min_size=2, max_size=50))
def test_deltas_of_a_counter_that_never_resets_add_up_to_its_growth(increments: list[int]) -> None:
    tracker: CounterTracker[str] = CounterTracker()
    value = 0
    total = 0
    for i, increment in enumerate(increments):
        value += increment
        delta = tracker.update("x", value, float(i)).delta
        total += delta or 0
    assert total == value - increments[0]


def test_a_delta_past_bigint_is_a_jump_reported_as_a_reset() -> None:
    assert counter_change(0, 0.0, 2**63, 1.0) == JUMPED
    assert JUMPED.reset and JUMPED.jumped and JUMPED.delta is None
    assert counter_change(0, 0.0, 2**63 - 1, 1.0).delta == 2**63 - 1


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_every_delta_reported_fits_bigint(previous: int, value: int) -> None:
    change = counter_change(previous, 0.0, value, 1.0)
    assert change.delta is None or 0 <= change.delta <= 2**63 - 1
