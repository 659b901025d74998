"""Plausibility limits on the counters ranks report: steps and collective sequence numbers.

A rank's counters are its own word. A lying reporter (a compromised host, a forged report) that claims a
collective sequence number far ahead of everyone else's makes every honest rank look "behind", i.e. stuck,
and so the target of a restart. Counters of one job move together (every collective and every step is
synchronised across its ranks) and at a bounded rate, so a counter that runs ahead of time, or of its peers,
by orders of magnitude is not evidence of anything: it is left out (and counted). Pure functions.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CounterLimits:
    # Faster than any real job: a tiny model steps a few hundred times a second, NCCL issues at most tens of
    # thousands of collectives a second per process group.
    max_per_second: float
    # Ahead of the peers' median by more than factor x median + slack is "orders of magnitude" ahead.
    peer_factor: float = 100.0
    slack: int = 1000


STEP_LIMITS = CounterLimits(max_per_second=1000.0)
COLLECTIVE_LIMITS = CounterLimits(max_per_second=100_000.0, slack=10_000)


def ahead_of_time(previous: int, previous_ts: float, value: int, ts: float, limits: CounterLimits) -> bool:
    """The counter moved from `previous` (at `previous_ts`) to `value` (at `ts`) faster than any job can."""
    elapsed = max(0.0, ts - previous_ts)
    return value - previous > limits.max_per_second * elapsed + limits.slack


def ahead_of_peers(value: int, peers: Sequence[int], limits: CounterLimits) -> bool:
    """`value` is orders of magnitude beyond the median of its peers' counters (no peers: cannot tell)."""
    if not peers:
        return False
    median = max(0.0, float(statistics.median(peers)))
    return value > limits.peer_factor * median + limits.slack


def implausible_among(values: dict[int, int], limits: CounterLimits) -> set[int]:
    """The ranks whose counter is ahead of the others' (each judged against the median of every other
    rank's). O(n log n): one sort, then each rank's "median of the others" read off the sorted list."""
    if len(values) < 2:
        return set()
    ordered = sorted(values.items(), key=lambda item: item[1])
    counts = [v for _, v in ordered]
    out = set()
    for i, (rank, value) in enumerate(ordered):
        median = _median_without(counts, i)
        if value > limits.peer_factor * max(0.0, median) + limits.slack:
            out.add(rank)
    return out


def _median_without(ordered: Sequence[int], i: int) -> float:
    """The median of the sorted `ordered` with its i-th element left out (at least two elements)."""
    k = len(ordered) - 1

    def at(p: int) -> int:  # the p-th of the others, in order
        return ordered[p if p < i else p + 1]

    if k % 2:
        return float(at(k // 2))
    return (at(k // 2 - 1) + at(k // 2)) / 2.0
