"""Safety: a circuit breaker that stops all repairs when too much of the fleet is hit too fast, and a repair
rate limit. Never resets by itself: an operator runs `fleetguard breaker reset` after looking.

What it counts survives a restart without a store of its own: every counted request is a ledger line marked
`counted` (the engine copies `Permit.counted` onto it), so the store rebuilds the window and the hour from the
ledger (`counted_state`), and a count can never be stored apart from the action it counts."""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnosis.incident import ActionOutcome
from diagnosis.model import RepairAction
from diagnosis.policy import BreakerPolicy

_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Permit:
    outcome: ActionOutcome  # REQUESTED (go ahead), HELD (breaker open) or DEFERRED (rate limit)
    reason: str = ""
    tripped_now: bool = False
    counted: bool = False  # the window and the rate limit weigh it (its ledger line says so)


@dataclass(slots=True)
class BreakerState:
    tripped: bool = False
    tripped_at: float | None = None
    reason: str = ""
    acted: deque[tuple[float, str]] = field(default_factory=deque)  # (when, host) within the window
    repairs: deque[float] = field(default_factory=deque)  # when, within the last hour
    # When an operator last reset it: `acted` holds only what was counted since (the hour's repairs stay).
    acted_since: float | None = None


@dataclass(frozen=True, slots=True)
class BreakerHeadroom:
    """How near the breaker is to tripping and the rate limit to deferring, as the next decision would weigh
    them: what an operator reads before a reset (`fleetguard breaker status`)."""

    fleet_hosts: int  # the fleet its fraction is of (hosts heard within `fleet_seconds`)
    hosts_acted: int  # distinct hosts acted on within the window
    window_seconds: float
    trips_at_hosts: int  # the breaker opens when a repair would make this many hosts acted on in the window
    repairs_last_hour: int
    repairs_per_hour: int  # the rate limit for this fleet


def trips(policy: BreakerPolicy, hosts_acted: int, fleet_hosts: int) -> bool:
    """The breaker's rule: this many distinct hosts acted on within the window open it."""
    return hosts_acted >= policy.min_hosts and hosts_acted / max(fleet_hosts, 1) > policy.max_host_fraction


def trip_threshold(policy: BreakerPolicy, fleet_hosts: int) -> int:
    """The fewest hosts acted on within the window that open the breaker (`trips`). Found with the rule
    itself, not only its algebra: 0.7 x 170 is 118.99999999999999 in floating point, so floor(f x n) + 1 said
    119 while 119 / 170 is not over 0.7 and the breaker opened at 120."""
    fleet = max(fleet_hosts, 1)
    n = max(policy.min_hosts, math.floor(policy.max_host_fraction * fleet) + 1)
    while not trips(policy, n, fleet):
        n += 1
    while n > policy.min_hosts and trips(policy, n - 1, fleet):
        n -= 1
    return n


def counting_horizon(policy: BreakerPolicy) -> float:
    """How far back the breaker's decisions look: counted requests older than this never matter again."""
    return max(policy.window_seconds, _HOUR)


def counted_state(
    tripped: bool,
    tripped_at: float | None,
    reason: str,
    acted_since: float | None,
    counted: Iterable[tuple[float, str]],
) -> BreakerState:
    """The state a breaker had, rebuilt from what was stored: its trip, its last reset and the counted
    requests (when, host) that were not skipped, within `counting_horizon`. Decisions made with it equal
    those of the breaker that counted them: every decision prunes to its window and hour first."""
    ordered = sorted(counted)
    return BreakerState(
        tripped=tripped,
        tripped_at=tripped_at,
        reason=reason,
        acted=deque(c for c in ordered if acted_since is None or c[0] >= acted_since),
        repairs=deque(when for when, _ in ordered),
        acted_since=acted_since,
    )


class CircuitBreaker:
    def __init__(self, policy: BreakerPolicy, state: BreakerState | None = None) -> None:
        self.policy = policy
        self.state = state or BreakerState()

    @property
    def tripped(self) -> bool:
        return self.state.tripped

    def permit(self, host: str, action: RepairAction, now: float, fleet_hosts: int) -> Permit:
        """May `action` on `host` go ahead now? An allowed action is counted."""
        if action not in self.policy.actions:
            return Permit(ActionOutcome.REQUESTED)
        if self.state.tripped:
            return self._held()
        self._prune(now)
        hosts = {h for _, h in self.state.acted} | {host}
        fleet = max(fleet_hosts, 1)
        if trips(self.policy, len(hosts), fleet):
            self.state.tripped = True
            self.state.tripped_at = now
            self.state.reason = (
                f"{len(hosts)} of {fleet} hosts acted on within {self.policy.window_seconds:g} s "
                f"(limit {self.policy.max_host_fraction:.0%})"
            )
            return Permit(ActionOutcome.HELD, self.state.reason, tripped_now=True)
        limit = self._limit(fleet)
        if len(self.state.repairs) >= limit:
            return Permit(ActionOutcome.DEFERRED, f"repair rate limit: {limit} per hour reached")
        self.state.acted.append((now, host))
        self.state.repairs.append(now)
        return Permit(ActionOutcome.REQUESTED, counted=True)

    def permit_backlog(self, host: str, action: RepairAction, now: float) -> Permit:
        """A held repair an operator released with the reset (`breaker reset --process-backlog`): it goes
        ahead whatever the window holds, since a person looked and asked for the whole backlog (checked
        like a new repair, the third of four held hosts would trip the breaker again on the backlog itself),
        and is counted, so further new repairs are weighed against it."""
        if action not in self.policy.actions:
            return Permit(ActionOutcome.REQUESTED)
        self.state.acted.append((now, host))
        self.state.repairs.append(now)
        return Permit(ActionOutcome.REQUESTED, counted=True)

    def permit_retry(self, action: RepairAction) -> Permit:
        """May a failed repair be tried again? Only while the breaker is closed; it is not counted again (its
        first attempt was), so a Slurm outage retried a few times neither trips the breaker nor spends the
        rate limit."""
        if action in self.policy.actions and self.state.tripped:
            return self._held()
        return Permit(ActionOutcome.REQUESTED)

    def forget(self, host: str, action: RepairAction, requested_at: float) -> None:
        """Uncount an action that never ran (recorded skipped: nothing configured to carry it out), so that
        actions nobody carries out can neither trip the breaker nor use up the rate limit."""
        if action not in self.policy.actions:
            return
        with contextlib.suppress(ValueError):  # already out of the window
            self.state.acted.remove((requested_at, host))
        with contextlib.suppress(ValueError):
            self.state.repairs.remove(requested_at)

    def _held(self) -> Permit:
        return Permit(
            ActionOutcome.HELD,
            f"circuit breaker open since {self.state.tripped_at:.0f}: {self.state.reason}",
        )

    def headroom(self, now: float, fleet_hosts: int) -> BreakerHeadroom:
        """What the next decision at `now` would weigh (nothing is counted)."""
        self._prune(now)
        return BreakerHeadroom(
            fleet_hosts=fleet_hosts,
            hosts_acted=len({h for _, h in self.state.acted}),
            window_seconds=self.policy.window_seconds,
            trips_at_hosts=trip_threshold(self.policy, fleet_hosts),
            repairs_last_hour=len(self.state.repairs),
            repairs_per_hour=self._limit(fleet_hosts),
        )

    def rate_limited(self, now: float, fleet_hosts: int) -> bool:
        """Would a repair now be deferred by the rate limit? (Nothing is counted.)"""
        self._prune(now)
        return len(self.state.repairs) >= self._limit(fleet_hosts)

    def _limit(self, fleet_hosts: int) -> int:
        fraction = self.policy.repairs_fraction_per_hour * max(fleet_hosts, 1)
        return max(self.policy.repairs_per_hour, math.floor(fraction))

    def reset(self, now: float) -> None:
        """Close it and start its window afresh (`acted_since`, stored, so a restart starts it there too);
        the hour's repairs still count against the rate limit."""
        self.state.tripped = False
        self.state.tripped_at = None
        self.state.reason = ""
        self.state.acted.clear()
        self.state.acted_since = now

    def _prune(self, now: float) -> None:
        while self.state.acted and now - self.state.acted[0][0] > self.policy.window_seconds:
            self.state.acted.popleft()
        while self.state.repairs and now - self.state.repairs[0] > _HOUR:
            self.state.repairs.popleft()
