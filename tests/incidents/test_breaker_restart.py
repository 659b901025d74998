"""The repair breaker across restarts, on a real store: the same rounds run once by one service and once by a
service closed and opened again on the reopened store (a controller or `up` that systemd restarted) give the
same ledger, line for line. A crash loop can never act on more of the fleet than the breaker allows."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from diagnosis.breaker import counting_horizon
from diagnosis.incident import ActionOutcome, IncidentChange
from diagnosis.rules import Signals
from fleetguard.incidents.incident_store import EvidenceRow, IncidentStore
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.records.telemetry import Event
from fleetguard.settings.diagnosis import DiagnosisConfig
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import T0, xid

HOSTS = ("n0", "n1", "n2", "n3")
TRIPS_AT_3_OF_4 = {"breaker": {"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 10}}
OTHER_GPU = "0000:3b:00"  # a second GPU of a host: a new incident, a new repair

Ledger = list[tuple[str, ActionOutcome, str]]  # each round's action lines: (host, outcome, detail)


@dataclass(frozen=True, slots=True)
class Step:
    now: float
    signals: Signals | None = None  # a round of records
    reset: bool = False  # an operator's `fleetguard breaker reset`
    backlog: bool = False  # ... --process-backlog
    resolve: bool = False  # an operator resolves every open incident
    prune_days: float | None = None  # the hourly prune, with this `store.retention_days`


def fleet(ts: float, *faults: Event) -> Signals:
    """Every host heard from (a fleet of four), then `faults`."""
    return Signals(events=[*(xid(43, ts, host=h) for h in HOSTS), *faults])


def run(
    path: Path,
    steps: Sequence[Step],
    restart_before: Sequence[int] = (),
    overrides: dict[str, Any] | None = None,
    executor: Callable[[], RepairExecutor | None] = lambda: None,
) -> list[Ledger]:
    """Each step's ledger lines; before the steps in `restart_before` the store is closed and reopened and a
    new service takes up what it holds, as after a restart."""
    policy = load_policy(overrides=overrides or TRIPS_AT_3_OF_4)
    ledgers: list[Ledger] = []
    store = Store.open(path)
    try:
        service = IncidentService.open(store.cursor(), policy, steps[0].now, executor=executor())
        for i, step in enumerate(steps):
            if i in restart_before:
                store.close()
                store = Store.open(path)
                service = IncidentService.open(store.cursor(), policy, step.now, executor=executor())
            changes: list[IncidentChange] = []
            if step.reset:
                changes += service.reset_breaker(step.now, process_backlog=step.backlog)
            if step.resolve:
                for incident in list(service.engine.active()):
                    service.resolve(incident.incident_id, step.now)
            if step.prune_days is not None:
                service.prune(step.now, step.prune_days)
            if step.signals is not None:
                changes += service.round(step.signals, step.now)
            ledgers.append(sorted((a.host, a.outcome, a.detail) for c in changes for a in c.actions))
    finally:
        store.close()
    return ledgers


def outcomes(ledger: Ledger) -> list[tuple[str, ActionOutcome]]:
    return [(host, outcome) for host, outcome, _ in ledger]


def test_a_repair_the_breaker_held_is_still_held_after_a_restart(tmp_path: Path) -> None:
    """Two of four hosts acted on, a restart, a third: held, 3 of 4 within 300 s, as without the restart."""
    steps = [
        Step(T0, fleet(T0)),
        Step(T0 + 5, fleet(T0 + 5, xid(79, T0 + 5, host="n0"), xid(79, T0 + 5, host="n1"))),
        Step(T0 + 10, fleet(T0 + 10, xid(79, T0 + 10, host="n2"))),
    ]
    once = run(tmp_path / "once.duckdb", steps)
    restarted = run(tmp_path / "restarted.duckdb", steps, restart_before=[2])
    assert restarted == once
    assert outcomes(once[1]) == [("n0", ActionOutcome.REQUESTED), ("n1", ActionOutcome.REQUESTED)]
    ((host, outcome, detail),) = restarted[2]
    assert (host, outcome) == ("n2", ActionOutcome.HELD)
    assert "3 of 4 hosts acted on within 300 s" in detail


def test_a_restart_between_every_round_changes_nothing(tmp_path: Path) -> None:
    """systemd restarting a crash-looping controller after each round: one host per round, the third held."""
    steps = [Step(T0, fleet(T0))] + [
        Step(T0 + 10 * i, fleet(T0 + 10 * i, xid(79, T0 + 10 * i, host=h))) for i, h in enumerate(HOSTS, 1)
    ]
    once = run(tmp_path / "once.duckdb", steps)
    restarted = run(tmp_path / "restarted.duckdb", steps, restart_before=range(1, len(steps)))
    assert restarted == once
    assert [outcomes(ledger) for ledger in restarted[1:]] == [
        [("n0", ActionOutcome.REQUESTED)],
        [("n1", ActionOutcome.REQUESTED)],
        [("n2", ActionOutcome.HELD)],
        [("n3", ActionOutcome.HELD)],
    ]


def test_the_repair_rate_limit_is_still_spent_after_a_restart(tmp_path: Path) -> None:
    """Two repairs an hour: two, a restart, the third deferred until the hour has passed, as without it."""
    overrides = {
        "breaker": {"max_host_fraction": 1.0, "repairs_per_hour": 2, "repairs_fraction_per_hour": 0.0}
    }
    steps = [
        Step(T0, fleet(T0)),
        Step(T0 + 5, fleet(T0 + 5, xid(79, T0 + 5, host="n0"), xid(79, T0 + 5, host="n1"))),
        Step(T0 + 60, fleet(T0 + 60, xid(79, T0 + 60, host="n2"))),
        Step(T0 + 3606, fleet(T0 + 3606)),
    ]
    once = run(tmp_path / "once.duckdb", steps, overrides=overrides)
    restarted = run(tmp_path / "restarted.duckdb", steps, restart_before=[2, 3], overrides=overrides)
    assert restarted == once
    assert outcomes(restarted[2]) == [("n2", ActionOutcome.DEFERRED)]
    assert outcomes(restarted[3]) == [("n2", ActionOutcome.REQUESTED)]


@pytest.mark.parametrize("backlog", [False, True])
def test_an_operators_reset_still_starts_the_window_afresh_after_a_restart(
    tmp_path: Path, backlog: bool
) -> None:
    """Tripped on n0..n3, reset (releasing the held n2 and n3, or not), restarted: a repair on n2 weighs only
    what was counted since the reset (the two hosts acted on before it are still within 300 s), as without
    the restart."""
    steps = [
        Step(T0, fleet(T0)),
        Step(T0 + 5, fleet(T0 + 5, *(xid(79, T0 + 5, host=h) for h in HOSTS))),
        Step(T0 + 100, reset=True, backlog=backlog),
        Step(T0 + 110, fleet(T0 + 110, xid(79, T0 + 110, host="n2", pci=OTHER_GPU))),
        Step(T0 + 120, fleet(T0 + 120, xid(79, T0 + 120, host="n3", pci=OTHER_GPU))),
        Step(T0 + 130, fleet(T0 + 130, xid(79, T0 + 130, host="n1", pci=OTHER_GPU))),
    ]
    once = run(tmp_path / "once.duckdb", steps)
    restarted = run(tmp_path / "restarted.duckdb", steps, restart_before=[3, 4, 5])
    assert restarted == once
    released = [("n2", ActionOutcome.REQUESTED), ("n3", ActionOutcome.REQUESTED)] if backlog else []
    assert outcomes(restarted[2]) == released
    assert [outcomes(ledger) for ledger in restarted[3:]] == [
        [("n2", ActionOutcome.REQUESTED)],
        [("n3", ActionOutcome.REQUESTED)],
        [("n1", ActionOutcome.HELD)],  # n2, n3 and n1 since the reset: 3 of 4
    ]


def test_pruning_keeps_the_ledger_lines_the_breaker_still_weighs(tmp_path: Path) -> None:
    """The shortest retention (0.01 days, 864 s) and closed incidents: their lines of the last hour stay, so
    the rate limit a restarted controller reads is the hour's, as without the restart."""
    overrides = {
        "breaker": {"max_host_fraction": 1.0, "repairs_per_hour": 2, "repairs_fraction_per_hour": 0.0},
        "lifecycle": {"close_after_seconds": 60},
        "escalation": {"window_seconds": 60},
    }
    steps = [
        Step(T0, fleet(T0)),
        Step(T0 + 5, fleet(T0 + 5, xid(79, T0 + 5, host="n0"), xid(79, T0 + 5, host="n1"))),
        Step(T0 + 10, resolve=True),
        Step(T0 + 100, fleet(T0 + 100)),  # closed
        Step(T0 + 1000, prune_days=0.01),
        Step(T0 + 1010, fleet(T0 + 1010, xid(79, T0 + 1010, host="n2"))),
    ]
    once = run(tmp_path / "once.duckdb", steps, overrides=overrides)
    restarted = run(tmp_path / "restarted.duckdb", steps, restart_before=[5], overrides=overrides)
    assert restarted == once
    assert outcomes(restarted[5]) == [("n2", ActionOutcome.DEFERRED)]


def test_a_skipped_repair_stays_uncounted_after_a_restart(tmp_path: Path) -> None:
    """No drain command: each drain is recorded skipped and must not count, before or after a restart."""
    overrides = {**TRIPS_AT_3_OF_4, "xid": {"79": {"action": "drain"}}}
    steps = [Step(T0, fleet(T0))] + [
        Step(T0 + i, fleet(T0 + i, xid(79, T0 + i, host=h))) for i, h in enumerate(HOSTS, 1)
    ]

    def executor() -> RepairExecutor:
        return RepairExecutor(DiagnosisConfig())

    once = run(tmp_path / "once.duckdb", steps, overrides=overrides, executor=executor)
    restarted = run(tmp_path / "restarted.duckdb", steps, [2, 3, 4], overrides=overrides, executor=executor)
    assert restarted == once
    # Each requested (and recorded skipped after it, in the round's second transaction): never held.
    assert [outcomes(ledger) for ledger in restarted[1:]] == [[(h, ActionOutcome.REQUESTED)] for h in HOSTS]


def test_the_breakers_counts_are_its_ledger_lines(tmp_path: Path) -> None:
    """By construction no crash can part a count from its action: the count is a column of the action's
    ledger line, written by the same INSERT. What the store gives back equals what the live breaker holds,
    and a round whose transaction fails leaves neither the line nor its count."""
    path = tmp_path / "s.duckdb"
    policy = load_policy(overrides=TRIPS_AT_3_OF_4)
    with Store.open(path) as store:
        service = IncidentService.open(store.cursor(), policy, T0)
        service.round(fleet(T0), T0)
        service.round(fleet(T0 + 5, *(xid(79, T0 + 5, host=h) for h in HOSTS)), T0 + 5)
        lines = store.connection.execute(
            "SELECT host, outcome, breaker_counted FROM incident_actions ORDER BY host"
        ).fetchall()
        assert lines == [
            ("n0", "requested", True),
            ("n1", "requested", True),
            ("n2", "held", False),
            ("n3", "held", False),
        ]
        live = service.engine.breaker.state
        stored = IncidentStore(store.cursor()).restore(T0 + 5, 0.0, counting_horizon(policy.breaker)).breaker
        assert (stored.acted, stored.repairs, stored.tripped, stored.reason) == (
            live.acted,
            live.repairs,
            live.tripped,
            live.reason,
        )

        service.engine.reset_breaker(T0 + 100, process_backlog=False)
        changes = service.engine.observe(
            fleet(T0 + 110, xid(79, T0 + 110, host="n2", pci=OTHER_GPU)), T0 + 110
        )
        assert [a.counted for c in changes for a in c.actions] == [True]
        # Evidence that cannot be stored (a time that is not a number), written after the ledger lines in
        # the same transaction: it fails, and the round's ledger line goes with it, its count included.
        unstorable = EvidenceRow("i1", math.nan, "observation", {})
        with pytest.raises(duckdb.Error):
            service.store.persist(changes, [unstorable], (), service.engine.breaker.state, T0 + 110)
        after = IncidentStore(store.cursor()).restore(T0 + 110, 0.0, counting_horizon(policy.breaker)).breaker
        assert list(after.acted) == [(T0 + 5, "n0"), (T0 + 5, "n1")]  # nor the reset of this lost round
        assert store.connection.execute(
            "SELECT count(*) FROM incident_actions WHERE host = 'n2' AND breaker_counted"
        ).fetchall() == [(0,)]


def test_an_older_store_counts_its_ledger_on_upgrade(tmp_path: Path) -> None:
    """Lines written before the counts were stored: a repair that went ahead counts, a retry, a held and a
    skipped one do not; the breaker restored from them holds a third host as the old process would have."""
    path = tmp_path / "old.duckdb"
    with Store.open(path, schema_version_target=17) as old:
        insert = (
            "INSERT INTO incident_actions VALUES (?, ?, ?, 'reboot_node', 'xid', "
            "make_timestamp(CAST(? * 1000000 AS BIGINT)), ?, NULL, ?, false)"
        )
        for row in (
            ("a0", "i0", "n0", T0 + 5, "succeeded", ""),
            ("a1", "i1", "n1", T0 + 6, "failed", "exit 1"),
            ("a2", "i1", "n1", T0 + 7, "failed", "attempt 2 of 3: exit 1 (tried again in 60 s)"),
            ("a3", "i2", "n2", T0 + 8, "requested", "retry 1 of 2: the last attempt failed: exit 1"),
            ("a4", "i3", "n3", T0 + 9, "held", "circuit breaker open"),
            ("a5", "i4", "n3", T0 + 9, "skipped", "no diagnosis.reboot_node_command configured"),
        ):
            old.connection.execute(insert, list(row))
    with Store.open(path) as store:
        counted = store.connection.execute(
            "SELECT action_id FROM incident_actions WHERE breaker_counted ORDER BY action_id"
        ).fetchall()
        assert counted == [("a0",), ("a1",)]
        policy = load_policy(overrides=TRIPS_AT_3_OF_4)
        breaker = (
            IncidentStore(store.cursor()).restore(T0 + 10, 0.0, counting_horizon(policy.breaker)).breaker
        )
        assert list(breaker.acted) == [(T0 + 5, "n0"), (T0 + 6, "n1")] and breaker.acted_since is None
