"""A repair that did not hold: the same fault back within the escalation window after a repair returned the
host to service goes one rung up the ladder, or pages where the ladder has no rung for it (pure engine)."""

from __future__ import annotations

from diagnosis.engine import IncidentEngine
from diagnosis.escalation import repair_did_not_hold, unheld_escalation
from diagnosis.incident import ChangeKind
from diagnosis.model import ComponentKind, IncidentKey, RepairAction, Severity
from diagnosis.policy import Escalation
from diagnosis.rules import Signals
from fleetguard.settings.policy_files import load_policy
from tests.diagnosis.records import T0, xid

DAY = 86400.0
# The XID names its GPU by PCI address here (no GPU sample maps it to a UUID).
KEY = IncidentKey("node1", ComponentKind.GPU, "0000:9b:00", "xid:79").text()


def _engine(action: str) -> IncidentEngine:
    return IncidentEngine(load_policy(None, {"xid": {"79": {"action": action}}}))


def test_the_window_decides_whether_a_repair_held() -> None:
    policy = Escalation()
    assert repair_did_not_hold(T0, T0 + 2 * DAY, policy)
    assert not repair_did_not_hold(T0, T0 + 8 * DAY, policy)  # past the 7-day window: it held
    assert not repair_did_not_hold(T0, T0 - 1, policy)  # a fault from before the return
    assert not repair_did_not_hold(None, T0, policy)


def test_an_action_on_the_ladder_goes_one_rung_up_and_one_off_it_pages() -> None:
    policy = Escalation()
    assert unheld_escalation(RepairAction.RESET_GPU, 0, True, Severity.WARNING, policy) == (
        1,
        RepairAction.REBOOT_NODE,
        Severity.WARNING,
    )
    assert unheld_escalation(RepairAction.DRAIN, 0, True, Severity.WARNING, policy) == (
        1,
        RepairAction.DRAIN,
        Severity.CRITICAL,
    )
    assert unheld_escalation(RepairAction.RESET_GPU, 0, False, Severity.WARNING, policy) == (
        0,
        RepairAction.RESET_GPU,
        Severity.WARNING,
    )


def test_the_engine_escalates_a_fault_back_after_a_repair_and_not_one_past_the_window() -> None:
    back = _engine("reset_gpu")
    back.returned = {KEY: T0 - 2 * DAY}
    [change] = back.observe(Signals(events=[xid(79, T0)]), T0 + 1)
    assert change.incident.action is RepairAction.REBOOT_NODE and change.incident.escalation_step == 1
    assert {ChangeKind.OPENED, ChangeKind.ESCALATED} <= set(change.kinds)
    assert change.incident.summary.endswith("(back after a repair that did not hold)")

    held = _engine("reset_gpu")
    held.returned = {KEY: T0 - 8 * DAY}
    [change] = held.observe(Signals(events=[xid(79, T0)]), T0 + 1)
    assert change.incident.action is RepairAction.RESET_GPU and ChangeKind.ESCALATED not in change.kinds


def test_a_drain_that_did_not_hold_pages() -> None:
    eng = _engine("drain")
    eng.returned = {KEY: T0 - DAY}
    [change] = eng.observe(Signals(events=[xid(79, T0)]), T0 + 1)
    assert change.incident.action is RepairAction.DRAIN and change.incident.severity is Severity.CRITICAL
    assert ChangeKind.ESCALATED in change.kinds
