"""The escalation ladder: the same fault back again and again gets a heavier action each time."""

from __future__ import annotations

from diagnosis.model import RepairAction, Severity
from diagnosis.policy import Escalation


def escalation_step(open_times: list[float], now: float, policy: Escalation) -> int:
    """0 for a first occurrence; +1 each time the fault came back `returns` more times within the window."""
    recent = sum(1 for t in open_times if now - t <= policy.window_seconds)
    returns = max(0, recent - 1)
    return returns // policy.returns


def escalated_action(base: RepairAction, step: int, policy: Escalation) -> RepairAction:
    """The ladder's action `step` rungs above `base`; an action off the ladder stays what it is."""
    if step <= 0 or base not in policy.ladder:
        return base
    index = min(policy.ladder.index(base) + step, len(policy.ladder) - 1)
    return policy.ladder[index]


def repair_did_not_hold(returned_at: float | None, now: float, policy: Escalation) -> bool:
    """The fault is back within the window after a repair of it returned the host to service: that repair
    did not hold (the next incident goes a step up the ladder, or pages)."""
    return returned_at is not None and 0.0 < now - returned_at <= policy.window_seconds


def unheld_escalation(
    base: RepairAction, step: int, unheld: bool, severity: Severity, policy: Escalation
) -> tuple[int, RepairAction, Severity]:
    """Step, action and severity once an unheld repair is counted: one rung up the ladder, and where that
    changes nothing (an action off the ladder such as a drain, or its top rung) a page (critical)."""
    action = escalated_action(base, step, policy)
    if not unheld:
        return step, action, severity
    higher = escalated_action(base, step + 1, policy)
    return step + 1, higher, severity if higher is not action else Severity.CRITICAL
