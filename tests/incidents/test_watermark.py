"""A reader's mark over ingest sequence values: statements that commit out of order, or never."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.incidents.watermark import SeqMark


def test_a_value_that_commits_after_a_higher_one_is_still_unread_and_then_taken_once() -> None:
    mark = SeqMark()
    mark.take([1, 2, 4], now=0.0)  # 3 is a statement still in flight
    assert mark.floor == 2 and mark.exclusions() == [(4, 4)]
    assert not mark.handed_on(3)
    mark.take([3], now=1.0)
    assert mark.floor == 4 and mark.exclusions() == []


def test_a_hole_below_what_was_read_a_grace_period_ago_is_given_up() -> None:
    mark = SeqMark()
    mark.take([1, 3], now=0.0, grace=10.0)  # 2 rolled back
    mark.take([4], now=5.0, grace=10.0)
    assert mark.floor == 1  # within the grace: 2 may still commit
    mark.take([], now=10.0, grace=10.0)
    assert mark.floor == 4 and mark.exclusions() == []


def test_the_mark_survives_its_json() -> None:
    mark = SeqMark()
    mark.take([1, 5, 6, 9], now=3.0)
    again = SeqMark.from_json(mark.floor, *mark.to_json())
    assert again == mark


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=40))
def test_every_value_that_commits_within_the_grace_is_handed_on_exactly_once(
    statements: list[tuple[int, bool]],
) -> None:
    """Statement n begins in round n and commits (or rolls back) up to 6 rounds later; rounds are 1 s apart
    and the grace is 10 s. Each round reads the committed values the mark has not handed on."""
    ends = {n: (n + delay, commits) for n, (delay, commits) in enumerate(statements, 1)}
    mark, committed, handed = SeqMark(), set[int](), list[int]()
    for now in range(len(statements) + 8):
        committed |= {n for n, (at, commits) in ends.items() if commits and at <= now}
        unread = sorted(n for n in committed if not mark.handed_on(n))
        handed += unread
        mark.take(unread, float(now), grace=10.0)
    assert sorted(handed) == sorted(committed)
    assert len(handed) == len(set(handed))
