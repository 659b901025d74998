"""The incident engine with a fake clock: dedup, thresholds, cancellation, resolution, escalation."""

from __future__ import annotations

from diagnosis.alert_payloads import AlertEvent, alert_events
from diagnosis.engine import IncidentEngine
from diagnosis.incident import ActionOutcome, ChangeKind, IncidentState, Resolution
from diagnosis.model import ComponentKind, IncidentKey, RepairAction
from diagnosis.rules import Signals
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.settings.policy_files import load_policy
from tests.diagnosis.records import T0, UUID, counter, gpu, port, xid


def engine(**overrides: object) -> IncidentEngine:
    return IncidentEngine(load_policy(overrides=overrides or None))


def test_an_xid_storm_of_100000_lines_is_one_incident_with_the_right_count() -> None:
    eng = engine()
    eng.observe(Signals(gpu_samples=[gpu(T0)]), T0)
    changes = []
    for chunk in range(10):
        events = [xid(95, T0 + chunk * 10 + i * 1e-4) for i in range(10_000)]
        changes += eng.observe(Signals(events=events), T0 + chunk * 10 + 1)
    opened = [c for c in changes if ChangeKind.OPENED in c.kinds]
    assert len(opened) == 1
    (incident,) = eng.active()
    assert incident.occurrences == 100_000
    assert incident.key == IncidentKey("node1", ComponentKind.GPU, UUID, "xid:95")
    assert incident.severity is Severity.CRITICAL
    assert incident.first_seen == T0


def test_folded_repeats_count_as_their_count() -> None:
    eng = engine()
    eng.observe(Signals(events=[xid(79, T0, count=800), xid(79, T0 + 5, count=200)]), T0 + 5)
    (incident,) = eng.active()
    assert incident.occurrences == 1000


def test_opening_captures_the_observations_and_requests_the_action() -> None:
    eng = engine()
    (change,) = eng.observe(Signals(events=[xid(79, T0)]), T0)
    assert change.opened and change.evidence[0].message.startswith("NVRM: Xid")
    (entry,) = change.actions
    assert (entry.action, entry.outcome) == (RepairAction.REBOOT_NODE, ActionOutcome.REQUESTED)
    assert change.incident.state is IncidentState.ACTING


def test_an_application_xid_alone_is_not_an_incident_until_it_repeats() -> None:
    eng = engine()
    assert eng.observe(Signals(events=[xid(31, T0)]), T0) == []
    # A second burst (beyond the burst window) within a day: now it matters.
    (change,) = eng.observe(Signals(events=[xid(31, T0 + 3600)]), T0 + 3600)
    assert change.opened and change.incident.occurrences == 2
    assert change.incident.action is RepairAction.INSPECT


def test_repeats_within_one_burst_are_one_occurrence_toward_the_threshold() -> None:
    eng = engine()
    assert eng.observe(Signals(events=[xid(31, T0 + i) for i in range(10)]), T0 + 60) == []  # below a storm


def test_an_application_xid_with_another_fault_of_the_same_gpu_opens() -> None:
    eng = engine()
    eng.observe(Signals(events=[xid(79, T0)]), T0)
    (change,) = eng.observe(Signals(events=[xid(13, T0 + 1)]), T0 + 1)
    assert change.incident.key.fault == "xid:13"


def test_xid_45_alone_never_opens_an_incident() -> None:
    eng = engine()
    assert eng.observe(Signals(events=[xid(45, T0 + 600 * i) for i in range(20)]), T0 + 12000) == []


def test_healthy_for_the_policy_time_resolves_then_closes() -> None:
    eng = engine(lifecycle={"resolve_healthy_seconds": 600, "close_after_seconds": 3600})
    eng.observe(Signals(events=[xid(119, T0 + 1)], gpu_samples=[gpu(T0)]), T0 + 1)
    assert eng.tick(T0 + 600) == []  # XID 119 is sticky for 3 h
    (resolved,) = eng.tick(T0 + 1 + 10800)
    assert resolved.kinds == (ChangeKind.RESOLVED,)
    assert resolved.incident.resolution is Resolution.HEALTHY
    (closed,) = eng.tick(T0 + 1 + 10800 + 3600)
    assert closed.incident.state is IncidentState.CLOSED
    assert eng.incidents == {}


def test_a_cancellation_pair_resolves_once_clear_for_the_flap_window_as_of_when_it_cleared() -> None:
    eng = engine()
    (opened,) = eng.observe(Signals(nic_samples=[port(T0, "DOWN")]), T0)
    assert opened.incident.key.fault == "nic:port_down"
    assert eng.observe(Signals(nic_samples=[port(T0 + 8, "ACTIVE")]), T0 + 8) == []
    assert eng.tick(T0 + 67) == []
    (resolved,) = eng.tick(T0 + 68)
    assert resolved.incident.resolution is Resolution.CANCELLED
    assert resolved.incident.resolved_at == T0 + 8


def test_without_damping_a_cancellation_pair_resolves_at_once() -> None:
    eng = engine(lifecycle={"flap_window_seconds": 0})
    eng.observe(Signals(nic_samples=[port(T0, "DOWN")]), T0)
    (resolved,) = eng.observe(Signals(nic_samples=[port(T0 + 8, "ACTIVE")]), T0 + 8)
    assert resolved.incident.resolved_at == T0 + 8


def test_a_port_flapping_20_times_in_a_minute_is_one_incident_and_two_alerts() -> None:
    eng = engine()
    changes = []
    for flap in range(20):
        ts = T0 + flap * 3.0
        changes += eng.observe(Signals(nic_samples=[port(ts, "DOWN")]), ts)
        changes += eng.observe(Signals(nic_samples=[port(ts + 1.5, "ACTIVE")]), ts + 1.5)
    for ts in range(60, 200, 5):
        changes += eng.tick(T0 + ts)
    assert len({c.incident.incident_id for c in changes}) == 1
    alerts = [e for c in changes for e in alert_events(c)]
    assert alerts == [AlertEvent.OPENED, AlertEvent.RESOLVED]
    assert changes[-1].incident.flaps == 19 and changes[-1].incident.returns == 0


def test_remap_pending_asks_for_a_reset_and_clears_when_no_longer_pending() -> None:
    eng = engine()
    (opened,) = eng.observe(Signals(gpu_samples=[gpu(T0, remapped_rows_pending=True)]), T0)
    assert opened.incident.action is RepairAction.RESET_GPU
    assert eng.observe(Signals(gpu_samples=[gpu(T0 + 60, remapped_rows_pending=False)]), T0 + 60) == []
    (cleared,) = eng.tick(T0 + 120)  # clear for the flap window
    assert cleared.incident.state is IncidentState.RESOLVED


def test_any_increase_of_link_downed_is_critical_and_symbol_errors_need_a_rate() -> None:
    eng = engine()
    assert eng.observe(Signals(nic_counters=[counter(T0, "symbol_error", 5, rate=0.5)]), T0) == []
    (change,) = eng.observe(Signals(nic_counters=[counter(T0, "link_downed", 1, rate=0.1)]), T0)
    assert change.incident.severity is Severity.CRITICAL
    (sym,) = eng.observe(Signals(nic_counters=[counter(T0 + 1, "symbol_error", 500, rate=500)]), T0 + 1)
    assert sym.incident.severity is Severity.CRITICAL


def test_uncorrected_ecc_growth_between_samples_is_critical() -> None:
    eng = engine()
    eng.observe(Signals(gpu_samples=[gpu(T0, ecc_uncorrected_volatile=0)]), T0)
    (change,) = eng.observe(Signals(gpu_samples=[gpu(T0 + 1, ecc_uncorrected_volatile=2)]), T0 + 1)
    assert change.incident.key.fault == "ecc:uncorrected"


def test_thermal_throttling_opens_and_clears() -> None:
    eng = engine()
    (opened,) = eng.observe(Signals(gpu_samples=[gpu(T0, clocks_event_reasons=0x40)]), T0)
    assert opened.incident.key.fault == "throttle:thermal"
    assert eng.observe(Signals(gpu_samples=[gpu(T0 + 5, clocks_event_reasons=0)]), T0 + 5) == []
    (cleared,) = eng.tick(T0 + 65)  # clear for the flap window
    assert cleared.incident.resolution is Resolution.CANCELLED


def test_a_runtime_finding_is_an_incident_of_its_job() -> None:
    eng = engine()
    finding = Finding(
        T0,
        "f1",
        FindingKind.DEAD_RANK,
        Severity.CRITICAL,
        "job/rank 3",
        "rank 3 died",
        host="node1",
        job_id="j1",
    )
    (change,) = eng.observe(Signals(findings=[finding]), T0)
    assert change.incident.key == IncidentKey("node1", ComponentKind.JOB, "j1", "finding:dead_rank")
    assert change.incident.action is RepairAction.RESTART_APP


def test_a_fault_that_keeps_coming_back_escalates_reset_reboot_inspect() -> None:
    eng = engine(lifecycle={"resolve_healthy_seconds": 60, "close_after_seconds": 100_000})
    actions = []
    now = T0
    for _ in range(5):
        for change in eng.observe(Signals(gpu_samples=[gpu(now, remapped_rows_pending=True)]), now):
            actions += [a.action for a in change.actions if not a.fault_returned]
        now += 3600
        eng.observe(Signals(gpu_samples=[gpu(now)]), now)  # a reading without the fault: healthy
    assert actions == [
        RepairAction.RESET_GPU,
        RepairAction.RESET_GPU,
        RepairAction.REBOOT_NODE,
        RepairAction.REBOOT_NODE,
        RepairAction.INSPECT,
    ]
    (incident,) = eng.incidents.values()
    assert incident.returns == 4  # one incident, reopened each time
    assert eng.actions[incident.incident_id].action is RepairAction.INSPECT


def test_a_returning_fault_marks_the_previous_action_as_not_having_worked() -> None:
    eng = engine(lifecycle={"resolve_healthy_seconds": 60})
    (opened,) = eng.observe(Signals(gpu_samples=[gpu(T0, remapped_rows_pending=True)]), T0)
    (first,) = opened.actions
    eng.action_finished(first.action_id, ActionOutcome.SUCCEEDED, "reset done", T0 + 10)
    eng.observe(Signals(gpu_samples=[gpu(T0 + 100)]), T0 + 100)
    (back,) = eng.observe(Signals(gpu_samples=[gpu(T0 + 200, remapped_rows_pending=True)]), T0 + 200)
    returned = [a for a in back.actions if a.action_id == first.action_id]
    assert returned and returned[0].fault_returned and returned[0].outcome is ActionOutcome.SUCCEEDED


def test_escalation_history_survives_a_restart() -> None:
    policy_overrides = {"lifecycle": {"resolve_healthy_seconds": 60, "close_after_seconds": 100_000}}
    first = engine(**policy_overrides)
    now = T0
    for _ in range(2):
        first.observe(Signals(gpu_samples=[gpu(now, remapped_rows_pending=True)]), now)
        now += 3600
        first.observe(Signals(gpu_samples=[gpu(now)]), now)
    second = engine(**policy_overrides)
    second.restore(
        first.incidents.values(),
        first.actions.values(),
        [(k, t) for k, times in first.history.items() for t in times],
    )
    (change,) = second.observe(Signals(gpu_samples=[gpu(now, remapped_rows_pending=True)]), now)
    assert change.incident.action is RepairAction.REBOOT_NODE
    assert ChangeKind.REOPENED in change.kinds


def test_a_gpu_fault_without_a_later_reading_is_not_called_healthy() -> None:
    eng = engine(lifecycle={"resolve_healthy_seconds": 60})
    eng.observe(Signals(gpu_samples=[gpu(T0, temperature_celsius=95.0)]), T0)
    assert eng.tick(T0 + 3600) == []  # the GPU said nothing since: still open
    (resolved,) = eng.observe(Signals(gpu_samples=[gpu(T0 + 3601, temperature_celsius=60.0)]), T0 + 3601)
    assert resolved.incident.resolution is Resolution.HEALTHY and resolved.incident.resolved_at == T0 + 3601


def test_an_operator_resolves_an_incident() -> None:
    eng = engine()
    (opened,) = eng.observe(Signals(events=[xid(79, T0)]), T0)
    (resolved,) = eng.resolve(opened.incident.incident_id, T0 + 5)
    assert resolved.incident.resolution is Resolution.OPERATOR


def test_a_software_power_cap_alone_is_not_a_fault_but_the_hardware_power_brake_is() -> None:
    eng = engine()
    assert eng.observe(Signals(gpu_samples=[gpu(T0, clocks_event_reasons=0x4)]), T0) == []
    (change,) = eng.observe(Signals(gpu_samples=[gpu(T0 + 1, clocks_event_reasons=0x80)]), T0 + 1)
    assert change.incident.key.fault == "throttle:power"


def test_a_flood_of_one_application_xid_in_one_burst_is_a_storm_incident() -> None:
    eng = engine()
    assert eng.observe(Signals(events=[xid(13, T0 + i) for i in range(10)]), T0 + 10) == []
    (change,) = eng.observe(Signals(events=[xid(13, T0 + 10 + i) for i in range(10)]), T0 + 20)
    assert change.opened and change.incident.occurrences == 20
    assert change.incident.key.fault == "xid:13"
