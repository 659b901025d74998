"""Naming the rank behind a hang when no rank reports collective progress: from where each rank stands.

A rank's position is the last step it began and the timed sections it finished in that step, with the time
it last moved. When a job hangs, the ranks that caused it are the ones whose position differs from their
peers':
- a strict minority still moving, past the step where the others stopped, issued no collective there: it
  skipped (or left) a collective its peers wait in;
- with every rank stopped, a strict minority one position ahead (it finished a section of the step the
  others never reached: it got past a collective they wait in) or behind (it never reached the collective
  the others wait in).
Nothing is named when no strict minority stands apart (a tie names no one). Pure: positions come in as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

AHEAD = "ahead"
BEHIND = "behind"


@dataclass(frozen=True, slots=True)
class RankPosition:
    step: int
    sections_done: frozenset[str] = frozenset()  # timed sections finished in `step`
    last_progress: float | None = None
    hung: bool = False


@dataclass(frozen=True, slots=True)
class PositionVerdict:
    suspects: tuple[int, ...]
    direction: str  # ahead | behind
    reasoning: str
    positions: dict[str, object] = field(default_factory=dict)


def position_outliers(positions: Mapping[int, RankPosition]) -> PositionVerdict | None:
    """The ranks whose position sets them apart from their peers in a hang, or None."""
    table: dict[str, object] = {
        str(r): {"step": p.step, "sections_done": sorted(p.sections_done), "hung": p.hung}
        for r, p in sorted(positions.items())
    }
    hung = {r: p for r, p in positions.items() if p.hung}
    moving = {r: p for r, p in positions.items() if not p.hung}
    if hung and moving:
        return _movers_past_the_stop(hung, moving, table)
    if len(hung) < 3:  # two ranks that differ: nothing says which of them is the odd one
        return None
    return _odd_position(hung, table)


def _movers_past_the_stop(
    hung: Mapping[int, RankPosition], moving: Mapping[int, RankPosition], table: dict[str, object]
) -> PositionVerdict | None:
    stopped_at = max(p.step for p in hung.values())
    past = sorted(r for r, p in moving.items() if p.step > stopped_at)
    # Peers at the stop that are not flagged yet (hangs are flagged rank by rank) stand with the stopped.
    stopped = sorted({*hung, *(r for r, p in moving.items() if p.step <= stopped_at)})
    if not past or len(past) >= len(stopped):
        return None
    steps = ", ".join(f"rank {r} at step {moving[r].step}" for r in past)
    reasoning = (
        f"{steps} kept stepping while ranks {_ranks(stopped)} stopped at step {stopped_at}: it issued no "
        "collective there, so it skipped (or left) a collective the others wait in"
    )
    return PositionVerdict(tuple(past), AHEAD, reasoning, table)


def _odd_position(hung: Mapping[int, RankPosition], table: dict[str, object]) -> PositionVerdict | None:
    groups: dict[tuple[int, int], list[int]] = {}
    for r, p in hung.items():
        groups.setdefault((p.step, len(p.sections_done)), []).append(r)
    if len(groups) != 2:
        return None
    (small_key, small), (big_key, big) = sorted(groups.items(), key=lambda kv: len(kv[1]))
    if len(small) >= len(big):
        return None
    direction = AHEAD if small_key > big_key else BEHIND
    odd, rest = hung[small[0]], hung[big[0]]
    where = f"step {odd.step} with {sorted(odd.sections_done) or 'no section'} done"
    peers = f"step {rest.step} with {sorted(rest.sections_done) or 'no section'} done"
    if direction == AHEAD:
        why = "it got past a collective they wait in (it skipped it)"
    else:
        why = "it never reached the collective they wait in"
    reasoning = f"ranks {_ranks(small)} stopped at {where}, ranks {_ranks(big)} at {peers}: {why}"
    return PositionVerdict(tuple(sorted(small)), direction, reasoning, table)


def _ranks(ranks: Mapping[int, object] | list[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
