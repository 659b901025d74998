"""The incident service on a real DuckDB store: changes, evidence and outbox rows in one transaction,
dedup that survives a restart, the feed that reads what the agent stored."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from diagnosis.incident import ActionOutcome
from diagnosis.model import RepairAction
from diagnosis.rules import Signals
from fleetguard.argv import CommandResult
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.incident_store import EvidenceRow, IncidentStore
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.settings.alerts import WebhookConfig, WebhookKind
from fleetguard.settings.diagnosis import DiagnosisConfig
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import T0, gpu, xid

HOOK = WebhookConfig(name="ops", url="http://127.0.0.1:9/hook", kind=WebhookKind.GENERIC, secret_file="s")


def open_service(store: Store, now: float, executor: RepairExecutor | None = None) -> IncidentService:
    return IncidentService.open(store.cursor(), load_policy(), now, webhooks=[HOOK], executor=executor)


def test_an_opened_incident_is_stored_with_its_evidence_and_an_outbox_row(store: Store) -> None:
    store.append([gpu(T0 - 30, temperature_celsius=70.0), gpu(T0 - 10, temperature_celsius=71.0)])
    store.append([xid(79, T0)])
    service = open_service(store, T0)
    service.round(Signals(gpu_samples=[gpu(T0 - 10)], events=[xid(79, T0)]), T0 + 1)
    con = store.connection
    incidents = con.execute("SELECT fault, state, occurrences FROM incidents").fetchall()
    assert incidents == [("xid:79", "acting", 1)]
    kinds = dict(con.execute("SELECT kind, count(*) FROM incident_evidence GROUP BY kind").fetchall())
    assert kinds == {"observation": 1, "gpu_sample": 2, "kernel_log": 1}
    outbox = con.execute("SELECT endpoint, event, status FROM alert_outbox").fetchall()
    assert outbox == [("ops", "opened", "pending")]
    actions = con.execute("SELECT action, outcome FROM incident_actions").fetchall()
    assert actions == [("reboot_node", "requested")]


def test_dedup_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        first = open_service(store, T0)
        first.round(Signals(events=[xid(95, T0 + i) for i in range(500)]), T0 + 500)
    with Store.open(path) as store:
        second = open_service(store, T0 + 600)
        second.round(Signals(events=[xid(95, T0 + 600 + i) for i in range(500)]), T0 + 1100)
        rows = store.connection.execute("SELECT fault, occurrences FROM incidents").fetchall()
        assert rows == [("xid:95", 1000)]
        assert store.connection.execute("SELECT count(*) FROM alert_outbox").fetchall() == [(1,)]


def test_repairs_run_after_the_evidence_is_stored_and_their_outcome_is_recorded(store: Store) -> None:
    seen: list[list[str]] = []

    def runner(argv: Sequence[str], timeout: float) -> CommandResult:
        # Evidence and the incident are already in the store when the repair starts.
        assert store.cursor().execute("SELECT count(*) FROM incident_evidence").fetchall()[0][0] > 0
        seen.append(list(argv))
        return CommandResult(tuple(argv), 0, "reset ok\n")

    config = DiagnosisConfig(reset_gpu_command=["nvidia-smi", "-r", "--host={host}", "--gpu={component}"])
    service = open_service(store, T0, RepairExecutor(config, runner))
    service.round(Signals(gpu_samples=[gpu(T0, remapped_rows_pending=True)]), T0)
    assert seen == [["nvidia-smi", "-r", "--host=node1", "--gpu=GPU-aaaa"]]
    rows = store.connection.execute("SELECT action, outcome, detail FROM incident_actions").fetchall()
    assert rows == [(RepairAction.RESET_GPU.value, ActionOutcome.SUCCEEDED.value, "reset ok")]


def test_a_repair_command_is_filled_per_argument_and_a_name_is_never_read_as_a_placeholder(
    store: Store,
) -> None:
    """A host named `{component}` (or holding spaces and quotes) stays one literal argument: one pass per
    argument, no chained replacement, no shell."""
    seen: list[list[str]] = []

    def runner(argv: Sequence[str], timeout: float) -> CommandResult:
        seen.append(list(argv))
        return CommandResult(tuple(argv), 0, "")

    config = DiagnosisConfig(reboot_node_command=["reboot-node", "{host}", "--at={host}/{{literal}}"])
    service = open_service(store, T0, RepairExecutor(config, runner))
    service.round(Signals(events=[xid(79, T0, host="{component} x'; rm -rf /")]), T0)
    assert seen == [["reboot-node", "{component} x'; rm -rf /", "--at={component} x'; rm -rf //{literal}"]]


def test_a_repair_without_a_command_is_recorded_as_skipped(store: Store) -> None:
    service = open_service(store, T0, RepairExecutor(DiagnosisConfig()))
    service.round(Signals(events=[xid(79, T0)]), T0)
    rows = store.connection.execute("SELECT outcome, detail FROM incident_actions").fetchall()
    assert rows == [("skipped", "no diagnosis.reboot_node_command configured")]


def test_the_feed_hands_on_each_stored_record_once(store: Store) -> None:
    feed = StoreFeed.open(store.cursor())
    store.append([xid(79, T0), gpu(T0)])
    first = feed.read(T0)
    assert len(list(first.events)) == 1 and len(first.gpu_rows.rows) == 1
    store.append([xid(79, T0 + 1), gpu(T0 + 1)])
    second = feed.read(T0 + 1)
    assert [e.ts for e in second.events] == [T0 + 1]
    ts = second.gpu_rows.names.index("ts")
    assert [row[ts] for row in second.gpu_rows.rows] == [T0 + 1]
    third = feed.read(T0 + 2)
    assert list(third.events) == [] and list(third.gpu_samples) == []


def test_the_feed_fetches_in_chunks_with_a_pause_point_between_and_loses_no_row(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows come FETCH_ROWS at a time (one call holding the interpreter for a whole round's rows stalled the
    request handlers), the pacer offered a pause before each chunk; the rows are those of one fetch."""
    import fleetguard.incidents.feed

    monkeypatch.setattr(fleetguard.incidents.feed, "FETCH_ROWS", 3)
    store.append([gpu(T0 + i, uuid=f"GPU-{i % 4}") for i in range(10)])
    feed = StoreFeed.open(store.cursor())
    pauses = 0

    def pace() -> None:
        nonlocal pauses
        pauses += 1

    feed.pace = pace
    rows = feed.read(T0 + 20).gpu_rows
    ts = rows.names.index("ts")
    assert [row[ts] for row in rows.rows] == [T0 + i for i in range(10)]
    assert len(set(rows.rows)) == 10
    # GPU rows: four chunks and the empty fetch that ends them; port rows: none, one empty fetch.
    assert pauses == 5 + 1


def test_pruning_forgets_closed_incidents_and_finished_alerts_but_keeps_open_ones(store: Store) -> None:
    service = open_service(store, T0)
    service.round(Signals(events=[xid(79, T0, host="old")]), T0)
    changes = service.round(Signals(events=[xid(48, T0 + 1, host="old")]), T0 + 1)
    for change in changes:
        service.resolve(change.incident.incident_id, T0 + 2)
    service.round(Signals(), T0 + 2 * 86400)  # resolved long ago: closed
    service.round(Signals(events=[xid(79, T0 + 100 * 86400, host="new")]), T0 + 100 * 86400)
    store.connection.execute("UPDATE alert_outbox SET status = 'delivered'")
    service.prune(T0 + 100 * 86400, retention_days=30)
    con = store.connection
    assert con.execute("SELECT host, fault FROM incidents ORDER BY host").fetchall() == [
        ("new", "xid:79"),
        ("old", "xid:79"),  # closed only in the last round: within the retention
    ]
    assert con.execute("SELECT count(*) FROM alert_outbox").fetchall() == [(1,)]


def test_a_round_that_fails_half_way_leaves_nothing_behind(store: Store) -> None:
    service = open_service(store, T0)
    changes = service.engine.observe(Signals(events=[xid(79, T0)]), T0 + 1)
    assert changes

    def evidence_that_breaks() -> Iterator[EvidenceRow]:
        raise OSError("the disk went away while the evidence was written")
        yield  # a generator: persist has already written the incidents when this runs

    with pytest.raises(OSError, match="disk went away"):
        IncidentStore(store.cursor()).persist(
            changes, evidence_that_breaks(), (), service.engine.breaker.state, T0
        )
    con = store.connection
    assert con.execute("SELECT count(*) FROM incidents").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM incident_actions").fetchall() == [(0,)]
    # the connection is usable again: the failed transaction was rolled back, not left open
    IncidentStore(store.cursor()).persist(changes, (), (), service.engine.breaker.state, T0)
    assert con.execute("SELECT count(*) FROM incidents").fetchall() == [(1,)]


def test_a_fleet_wide_incident_runs_no_host_repair_for_it_names_no_host(store: Store) -> None:
    """A finding about the fleet (a fault on many hosts) is filed under the host name "fleet", which no host
    may take. A policy that gives its kind a host repair must still not hand that name to a command or to
    Slurm: `ssh fleet`, a resolver's search domain or a case-blind node name would find a machine called
    FLEET or fleet.example.com (names an agent may take) and drain or reboot it."""
    seen: list[list[str]] = []

    def runner(argv: Sequence[str], timeout: float) -> CommandResult:
        seen.append(list(argv))
        return CommandResult(tuple(argv), 0, "")

    config = DiagnosisConfig(drain_command=["drain", "{host}"])
    policy = load_policy(overrides={"findings": {"fleet_fault": {"severity": "critical", "action": "drain"}}})
    service = IncidentService.open(
        store.cursor(), policy, T0, webhooks=[HOOK], executor=RepairExecutor(config, runner)
    )
    fleet_wide = Finding(
        T0, "ff-1", FindingKind.FLEET_FAULT, Severity.CRITICAL, "fleet/xid:79", "XID 79 on 9 hosts"
    )
    service.round(Signals(findings=[fleet_wide]), T0)
    assert seen == []
    rows = store.connection.execute("SELECT host, action, outcome FROM incident_actions").fetchall()
    assert rows == [("fleet", "drain", "skipped")]
