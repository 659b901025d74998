"""Crash blame: the rank that failed first in its own right, not the first process to exit."""

from __future__ import annotations

from straggler.crash import Blame, RankFailure, decisive, first_failure


def test_an_own_exception_outranks_an_earlier_peer_error_and_exit() -> None:
    peer = RankFailure(
        1, ts=10.0, exit_code=1, error_type="RuntimeError", message="[gloo] Connection closed by peer"
    )
    own = RankFailure(2, ts=10.2, exit_code=None, error_type="ValueError", message="bad batch")
    assert (peer.blame, own.blame) == (Blame.COLLATERAL, Blame.OWN)
    assert first_failure([peer, own]) == own and decisive([peer, own])


def test_of_two_own_failures_the_earlier_is_the_culprit() -> None:
    a = RankFailure(3, ts=5.0, error_type="ValueError", message="x")
    b = RankFailure(0, ts=4.0, exit_code=-9)  # SIGKILL: the OOM killer, never a teardown
    assert first_failure([a, b]) == b


def test_a_teardown_signal_or_a_rank_waiting_in_a_collective_is_collateral() -> None:
    assert RankFailure(0, 1.0, exit_code=-15).blame == Blame.COLLATERAL
    assert RankFailure(0, 1.0, exit_code=1, in_collective=True).blame == Blame.COLLATERAL
    assert RankFailure(0, 1.0, exit_code=-9, in_collective=True).blame == Blame.OWN
    assert RankFailure(0, 1.0, exit_code=1).blame == Blame.UNKNOWN


def test_with_nothing_own_known_the_verdict_waits_and_then_takes_the_earliest_unknown() -> None:
    waiting = RankFailure(0, 1.0, exit_code=1, in_collective=True)
    plain = RankFailure(1, 2.0, exit_code=1)
    assert not decisive([waiting, plain])
    assert first_failure([waiting, plain]) == plain
