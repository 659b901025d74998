"""The circuit breaker and the repair rate limit, alone and inside the engine."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from diagnosis.breaker import CircuitBreaker, counted_state, trip_threshold
from diagnosis.engine import BREAKER_KEY, IncidentEngine
from diagnosis.incident import ActionOutcome, IncidentState
from diagnosis.model import RepairAction
from diagnosis.policy import BreakerPolicy
from diagnosis.rules import Signals
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.settings.policy_files import load_policy
from tests.diagnosis.records import T0, xid


def test_acting_on_more_than_the_fraction_of_hosts_trips_and_holds_everything_after() -> None:
    breaker = CircuitBreaker(
        BreakerPolicy(max_host_fraction=0.5, window_seconds=300, min_hosts=2, repairs_per_hour=100)
    )
    assert breaker.permit("a", RepairAction.REBOOT_NODE, T0, 4).outcome is ActionOutcome.REQUESTED
    assert breaker.permit("b", RepairAction.REBOOT_NODE, T0 + 1, 4).outcome is ActionOutcome.REQUESTED
    third = breaker.permit("c", RepairAction.REBOOT_NODE, T0 + 2, 4)
    assert third.outcome is ActionOutcome.HELD and third.tripped_now and "3 of 4 hosts" in third.reason
    # It never resets by itself.
    assert breaker.permit("a", RepairAction.RESET_GPU, T0 + 86400, 4).outcome is ActionOutcome.HELD
    breaker.reset(T0 + 86400)
    assert breaker.permit("a", RepairAction.RESET_GPU, T0 + 86401, 4).outcome is ActionOutcome.REQUESTED


def test_actions_spread_beyond_the_window_do_not_trip() -> None:
    breaker = CircuitBreaker(
        BreakerPolicy(max_host_fraction=0.5, window_seconds=300, min_hosts=2, repairs_per_hour=100)
    )
    for i, host in enumerate("abcd"):
        assert (
            breaker.permit(host, RepairAction.REBOOT_NODE, T0 + i * 301, 4).outcome is ActionOutcome.REQUESTED
        )


def test_the_repair_rate_limit_defers_beyond_max_of_floor_and_fraction_per_hour() -> None:
    breaker = CircuitBreaker(
        BreakerPolicy(max_host_fraction=1.0, repairs_per_hour=3, repairs_fraction_per_hour=0.1)
    )
    outcomes = [breaker.permit(f"h{i}", RepairAction.RESET_GPU, T0 + i, 100).outcome for i in range(12)]
    assert outcomes.count(ActionOutcome.REQUESTED) == 10  # max(3, 10% of 100)
    assert outcomes[10:] == [ActionOutcome.DEFERRED] * 2
    assert (
        breaker.permit("h99", RepairAction.RESET_GPU, T0 + 3601 + 11, 100).outcome is ActionOutcome.REQUESTED
    )


def test_observing_actions_are_never_limited() -> None:
    breaker = CircuitBreaker(BreakerPolicy(repairs_per_hour=0, repairs_fraction_per_hour=0.0))
    assert breaker.permit("a", RepairAction.INSPECT, T0, 1).outcome is ActionOutcome.REQUESTED


def test_the_engine_opens_a_breaker_incident_holds_actions_and_replays_the_backlog_on_reset() -> None:
    eng = IncidentEngine(
        load_policy(overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 10}})
    )
    hosts = [f"n{i}" for i in range(4)]
    eng.observe(Signals(events=[xid(43, T0, host=h) for h in hosts]), T0)  # the fleet has 4 hosts
    changes = eng.observe(Signals(events=[xid(79, T0 + 1 + i, host=h) for i, h in enumerate(hosts)]), T0 + 5)
    outcomes = [a.outcome for c in changes for a in c.actions]
    assert outcomes == [
        ActionOutcome.REQUESTED,
        ActionOutcome.REQUESTED,
        ActionOutcome.HELD,
        ActionOutcome.HELD,
    ]
    assert eng.incidents[BREAKER_KEY].state is IncidentState.OPEN
    reset = eng.reset_breaker(T0 + 600, process_backlog=True)
    assert eng.incidents[BREAKER_KEY].state is IncidentState.RESOLVED
    requested = [a for c in reset for a in c.actions if a.outcome is ActionOutcome.REQUESTED]
    assert len(requested) == 2  # the two held reboots


def test_the_fleet_is_the_hosts_heard_within_fleet_seconds_so_retired_hosts_make_it_no_more_lenient() -> None:
    overrides = {"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 10, "fleet_seconds": 86400}
    eng = IncidentEngine(load_policy(overrides={"breaker": overrides}))
    hosts = [f"n{i}" for i in range(4)]
    eng.observe(Signals(events=[xid(43, T0, host=h) for h in hosts]), T0)  # four hosts, then two retired
    assert eng.fleet_size(T0) == 4
    later = T0 + 2 * 86400
    eng.observe(Signals(events=[xid(43, later, host=h) for h in hosts[:2]]), later)
    changes = eng.observe(
        Signals(events=[xid(79, later + 1 + i, host=h) for i, h in enumerate(hosts[:2])]), later + 5
    )
    # Two of the two hosts still there, within the window: more than half of the fleet. Counted against
    # the four ever heard, it would have been half, and both reboots would have gone ahead.
    assert [a.outcome for c in changes for a in c.actions] == [ActionOutcome.REQUESTED, ActionOutcome.HELD]
    assert eng.fleet_size(later + 5) == 2 and set(eng.hosts) == {"n0", "n1"}  # the others forgotten


def test_reset_without_the_backlog_leaves_held_actions_alone() -> None:
    eng = IncidentEngine(
        load_policy(overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 10}})
    )
    hosts = [f"n{i}" for i in range(4)]
    eng.observe(Signals(events=[xid(79, T0 + i, host=h) for i, h in enumerate(hosts)]), T0 + 5)
    reset = eng.reset_breaker(T0 + 600, process_backlog=False)
    assert not [a for c in reset for a in c.actions]


def test_a_deferred_repair_is_requested_once_the_rate_limit_allows() -> None:
    policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0, "repairs_per_hour": 1}})
    eng = IncidentEngine(policy)
    eng.observe(Signals(events=[xid(79, T0, host="a"), xid(79, T0 + 1, host="b")]), T0 + 1)
    outcomes = {a.host: a.outcome for a in eng.actions.values()}
    assert outcomes == {"a": ActionOutcome.REQUESTED, "b": ActionOutcome.DEFERRED}
    assert eng.tick(T0 + 1800) == []  # still within the hour: nothing new in the ledger
    (change,) = eng.tick(T0 + 3602)
    assert [(a.host, a.outcome) for a in change.actions] == [("b", ActionOutcome.REQUESTED)]


def test_a_skipped_repair_is_not_counted_so_nothing_that_never_ran_trips_the_breaker() -> None:
    """The demo's two hosts, no drain_command: the first drain is recorded skipped, and the second host's
    drain must not find the fleet half acted on."""
    eng = IncidentEngine(load_policy(overrides={"xid": {"79": {"action": "drain"}}}))
    eng.observe(Signals(events=[xid(43, T0, host=h) for h in ("a", "b")]), T0)
    (change,) = eng.observe(Signals(events=[xid(79, T0 + 1, host="a")]), T0 + 1)
    (entry,) = change.actions
    eng.action_finished(
        entry.action_id, ActionOutcome.SKIPPED, "no diagnosis.drain_command configured", T0 + 1
    )
    (second,) = eng.observe(Signals(events=[xid(79, T0 + 2, host="b")]), T0 + 2)
    assert [a.outcome for a in second.actions] == [ActionOutcome.REQUESTED]
    assert not eng.breaker.tripped


def test_a_repair_that_ran_stays_counted() -> None:
    eng = IncidentEngine(load_policy(overrides={"xid": {"79": {"action": "drain"}}}))
    eng.observe(Signals(events=[xid(43, T0, host=h) for h in ("a", "b")]), T0)
    (change,) = eng.observe(Signals(events=[xid(79, T0 + 1, host="a")]), T0 + 1)
    eng.action_finished(change.actions[0].action_id, ActionOutcome.FAILED, "exit 1", T0 + 1)
    changes = eng.observe(Signals(events=[xid(79, T0 + 2, host="b")]), T0 + 2)
    assert [a.outcome for c in changes for a in c.actions] == [ActionOutcome.HELD] and eng.breaker.tripped


def test_forgetting_uncounts_one_action_of_a_breaker_action_only() -> None:
    breaker = CircuitBreaker(BreakerPolicy(max_host_fraction=1.0, repairs_per_hour=1))
    assert breaker.permit("a", RepairAction.DRAIN, T0, 10).outcome is ActionOutcome.REQUESTED
    assert breaker.permit("b", RepairAction.DRAIN, T0 + 1, 10).outcome is ActionOutcome.DEFERRED
    breaker.forget("a", RepairAction.INSPECT, T0)  # never counted: changes nothing
    assert breaker.rate_limited(T0 + 1, 10)
    breaker.forget("a", RepairAction.DRAIN, T0)
    assert not breaker.rate_limited(T0 + 1, 10)
    breaker.forget("a", RepairAction.DRAIN, T0)  # twice: nothing left to forget, no error
    assert breaker.permit("b", RepairAction.DRAIN, T0 + 2, 10).outcome is ActionOutcome.REQUESTED


def test_the_shipped_policy_puts_slurm_down_behind_the_breaker() -> None:
    """`down` kills running jobs: it must never go around the breaker that holds a drain back."""
    actions = load_policy().breaker.actions
    assert RepairAction.DOWN in actions and RepairAction.DRAIN in actions


def test_a_released_backlog_is_carried_out_whole_and_does_not_trip_the_breaker_again() -> None:
    """Three reboots held in a fleet of four (the second host acted on opened it): weighed like new repairs,
    the second would trip the breaker again on the backlog an operator just released. They all go, and count
    against what comes next."""
    eng = IncidentEngine(
        load_policy(
            overrides={"breaker": {"max_host_fraction": 0.25, "min_hosts": 2, "repairs_per_hour": 10}}
        )
    )
    hosts = [f"n{i}" for i in range(4)]
    eng.observe(Signals(events=[xid(79, T0 + i, host=h) for i, h in enumerate(hosts)]), T0 + 5)
    held = sorted(e.host for e in eng.actions.values() if e.outcome is ActionOutcome.HELD)
    assert len(held) == 3
    reset = eng.reset_breaker(T0 + 600, process_backlog=True)
    requested = sorted(a.host for c in reset for a in c.actions if a.outcome is ActionOutcome.REQUESTED)
    assert requested == held and not eng.breaker.tripped
    changes = eng.observe(Signals(events=[xid(79, T0 + 601, host="n9")]), T0 + 601)
    assert [a.outcome for c in changes for a in c.actions if a.host == "n9"] == [ActionOutcome.HELD]


def test_a_breaker_rebuilt_from_its_counted_requests_and_last_reset_decides_as_the_one_that_counted() -> None:
    """What the store gives back after a restart (`counted_state`): the counted (time, host) pairs, the trip
    and the last reset. The pairs from before the reset still spend the hour, not the window."""
    policy = BreakerPolicy(max_host_fraction=0.5, window_seconds=300, min_hosts=2, repairs_per_hour=4)
    live = CircuitBreaker(policy)
    counted = []
    for i, host in enumerate("ab"):
        permit = live.permit(host, RepairAction.REBOOT_NODE, T0 + i, 4)
        assert permit.counted
        counted.append((T0 + i, host))
    assert live.permit("c", RepairAction.REBOOT_NODE, T0 + 2, 4).outcome is ActionOutcome.HELD
    assert not live.permit("c", RepairAction.INSPECT, T0 + 2, 4).counted  # never weighed
    live.reset(T0 + 100)
    for i, host in enumerate("cd"):
        assert live.permit(host, RepairAction.REBOOT_NODE, T0 + 101 + i, 4).counted
        counted.append((T0 + 101 + i, host))
    s = live.state
    rebuilt = CircuitBreaker(policy, counted_state(s.tripped, s.tripped_at, s.reason, s.acted_since, counted))
    assert list(rebuilt.state.acted) == [(T0 + 101, "c"), (T0 + 102, "d")]
    for breaker in (live, rebuilt):
        # c again: the window holds c and d (a and b were before the reset: with them c would trip it), and
        # the hour's four repairs defer it.
        assert breaker.permit("c", RepairAction.REBOOT_NODE, T0 + 110, 4).outcome is ActionOutcome.DEFERRED
        assert breaker.permit("a", RepairAction.REBOOT_NODE, T0 + 3601, 4).outcome is ActionOutcome.REQUESTED


@given(
    fraction=st.floats(0.01, 1.0),
    min_hosts=st.integers(1, 8),
    fleet=st.integers(1, 200),
)
@example(fraction=0.7, min_hosts=1, fleet=170)  # 0.7 x 170 = 118.99999999999999: said 119, opened at 120
def test_the_headroom_says_at_which_host_the_breaker_opens_as_permit_decides(
    fraction: float, min_hosts: int, fleet: int
) -> None:
    """Distinct hosts acted on one by one: before each, `headroom` counts them, and the permit that opens the
    breaker is the one that would make `trips_at_hosts` of them."""
    policy = BreakerPolicy(
        max_host_fraction=fraction, window_seconds=300, min_hosts=min_hosts, repairs_per_hour=10_000
    )
    breaker = CircuitBreaker(policy)
    for i in range(fleet + 1):
        room = breaker.headroom(T0 + i, fleet)
        assert room.hosts_acted == i and room.fleet_hosts == fleet
        assert room.trips_at_hosts == trip_threshold(policy, fleet)
        permit = breaker.permit(f"h{i}", RepairAction.REBOOT_NODE, T0 + i, fleet)
        if permit.outcome is ActionOutcome.HELD:
            assert permit.tripped_now and i + 1 == room.trips_at_hosts
            return
        assert i + 1 < room.trips_at_hosts
    # Never opened: the threshold is beyond the fleet (a fraction of 1.0 can never be exceeded).
    assert trip_threshold(policy, fleet) > fleet + 1


def test_the_headroom_counts_the_hours_repairs_against_the_rate_limit_and_forgets_the_window() -> None:
    policy = BreakerPolicy(max_host_fraction=0.5, window_seconds=300, min_hosts=2, repairs_per_hour=3)
    breaker = CircuitBreaker(policy)
    for i, host in enumerate("ab"):
        breaker.permit(host, RepairAction.REBOOT_NODE, T0 + i, 40)
    room = breaker.headroom(T0 + 10, 40)
    assert (room.hosts_acted, room.trips_at_hosts, room.repairs_last_hour, room.repairs_per_hour) == (
        2,
        21,
        2,
        4,
    )
    later = breaker.headroom(T0 + 400, 40)  # past the window, inside the hour
    assert (later.hosts_acted, later.repairs_last_hour) == (0, 2)
    assert breaker.headroom(T0 + 3700, 40).repairs_last_hour == 0


def test_the_fleet_a_round_is_weighed_against_does_not_depend_on_the_order_of_its_records() -> None:
    """Four hosts whose GPUs fall off the bus in one round: all four were heard in that round, so the breaker
    weighs each repair against a fleet of four whatever order the records came in (it once grew the fleet
    host by host and opened at the second: "2 of 2 hosts")."""
    policy = load_policy(
        overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 10}}
    )
    outcomes = []
    for order in (range(4), reversed(range(4))):
        eng = IncidentEngine(policy)
        eng.observe(Signals(events=[xid(79, T0, host=f"n{i}") for i in order]), T0 + 1)
        held = [e for e in eng.actions.values() if e.outcome is ActionOutcome.HELD]
        outcomes.append(sorted(e.outcome.value for e in eng.actions.values()))
        assert len(held) == 2 and any("3 of 4 hosts" in e.detail for e in held)
    assert outcomes[0] == outcomes[1]


def test_a_fleet_wide_finding_adds_no_host_to_the_fleet_the_breaker_weighs() -> None:
    """A finding about the fleet is filed under the name "fleet", which is no host's: counted as one, it
    made the fleet one host larger than it is, and the breaker's fractions are of that fleet."""
    hosts = [f"n{i}" for i in range(4)]
    fleet_wide = Finding(
        T0, "ff-1", FindingKind.FLEET_FAULT, Severity.CRITICAL, "fleet/xid:79", "XID 79 on 4 hosts"
    )
    policy = {"findings": {"fleet_fault": {"severity": "critical", "action": "inspect"}}}
    eng = IncidentEngine(
        load_policy(overrides={**policy, "breaker": {"max_host_fraction": 0.5, "min_hosts": 2}})
    )
    eng.observe(Signals(events=[xid(43, T0, host=h) for h in hosts], findings=[fleet_wide]), T0)
    assert eng.fleet_size(T0) == 4 and "fleet" not in eng.hosts
