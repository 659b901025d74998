"""Plausibility limits: a counter cannot run ahead of time, nor of its peers, by orders of magnitude."""

from __future__ import annotations

from straggler.plausibility import (
    COLLECTIVE_LIMITS,
    STEP_LIMITS,
    ahead_of_peers,
    ahead_of_time,
    implausible_among,
)


def test_a_step_counter_moving_at_a_real_jobs_pace_is_plausible() -> None:
    assert not ahead_of_time(100, 1000.0, 160, 1060.0, STEP_LIMITS)  # one step a second


def test_a_step_counter_jumping_a_billion_steps_in_a_second_runs_ahead_of_time() -> None:
    assert ahead_of_time(100, 1000.0, 10**9, 1001.0, STEP_LIMITS)


def test_a_counter_going_back_is_never_ahead_of_time() -> None:
    assert not ahead_of_time(10**9, 1000.0, 0, 1000.0, COLLECTIVE_LIMITS)  # a restarted process


def test_a_collective_counter_orders_of_magnitude_past_its_peers_is_implausible() -> None:
    assert ahead_of_peers(10**12, [1000, 1001, 999], COLLECTIVE_LIMITS)
    assert not ahead_of_peers(1010, [1000, 1001, 999], COLLECTIVE_LIMITS)
    assert not ahead_of_peers(10**12, [], COLLECTIVE_LIMITS)  # no peers: nothing to judge by


def test_of_two_ranks_only_the_one_far_ahead_is_left_out() -> None:
    assert implausible_among({0: 10**12, 1: 1000}, COLLECTIVE_LIMITS) == {0}


def test_ranks_a_few_collectives_apart_are_all_plausible() -> None:
    values = {r: 5_000_000 + r for r in range(64)}
    assert implausible_among(values, COLLECTIVE_LIMITS) == set()


def test_a_rank_just_starting_beside_peers_far_along_is_not_the_implausible_one() -> None:
    # A rank that is behind looks stuck, which is what the hang localiser is for: only "ahead" is refused.
    assert implausible_among({0: 0, 1: 5_000_000, 2: 5_000_001}, COLLECTIVE_LIMITS) == set()
