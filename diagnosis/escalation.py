"""The escalation ladder: the same fault back again and again gets a heavier action each time."""

from __future__ import annotations

from diagnosis.model import RepairAction
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
