"""Deltas and rates of cumulative counters between readings, with resets (the value went down) made explicit.

Pure logic: the caller passes values and timestamps. A reset (driver reload, counter cleared) yields
`reset=True` with no delta and no rate, never a negative number; the reading after a reset is measured from
the value seen at the reset. A jump no real counter makes between two readings (a delta past BIGINT, the
stored column: 2**63 events, centuries at any link speed) is a discontinuity too, reported as a reset with
`jumped=True` so that the caller can count it; the reading after it is measured from the jumped value.
A rate needs time to have passed: with the same or an earlier timestamp (a wall clock stepped back) the
delta is still reported but the rate is None.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

from fleetguard.records.bounds import INT64_MAX

K = TypeVar("K", bound=Hashable)


class CounterChange(NamedTuple):
    """What changed since the previous reading of the same counter. All None on a first reading."""

    delta: int | None
    rate_per_second: float | None
    reset: bool
    jumped: bool = False


FIRST_READING = CounterChange(None, None, False)
RESET = CounterChange(None, None, True)
JUMPED = CounterChange(None, None, True, True)
# Most counters (the error ones) do not move between rounds; sharing one answer saves an allocation each.
UNCHANGED = CounterChange(0, 0.0, False)


def counter_change(previous_value: int, previous_ts: float, value: int, ts: float) -> CounterChange:
    """The change from (previous_value at previous_ts) to (value at ts)."""
    if value < previous_value:
        return RESET
    delta = value - previous_value
    if delta > INT64_MAX:
        return JUMPED
    elapsed = ts - previous_ts
    return CounterChange(delta, delta / elapsed if elapsed > 0 else None, False)


class CounterTracker(Generic[K]):
    """Remembers the last reading of each counter (by key) and turns a new reading into a CounterChange."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[K, tuple[int, float]] = {}

    def update(self, key: K, value: int, ts: float) -> CounterChange:
        last = self._last
        previous = last.get(key)
        last[key] = (value, ts)
        if previous is None:
            return FIRST_READING
        previous_value, previous_ts = previous
        if value == previous_value and ts > previous_ts:
            return UNCHANGED
        return counter_change(previous_value, previous_ts, value, ts)

    def retain(self, keys: set[K]) -> None:
        """Forget every counter not in `keys` (they vanished), so memory follows what exists."""
        for key in [k for k in self._last if k not in keys]:
            del self._last[key]

    def __len__(self) -> int:
        return len(self._last)
