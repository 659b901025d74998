"""The policy page's replay: recorded history through the policy in force and through a candidate, and
where they differ. On demand, one at a time, over `[dashboard] replay_hours` of history."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final

from dashboard.context import DashboardContext

_RUNNING: Final = threading.Lock()
STEP_SECONDS: Final = 60.0


@dataclass(frozen=True)
class ReplayOutcome:
    ok: bool
    message: str
    difference: dict[str, Any]
    current: dict[str, Any]
    candidate: dict[str, Any]


def replay_candidate(ctx: DashboardContext) -> ReplayOutcome:
    settings = ctx.config.dashboard
    if not settings.candidate_policy_file:
        return ReplayOutcome(False, "no candidate: set [dashboard] candidate_policy_file", {}, {}, {})
    if not _RUNNING.acquire(blocking=False):
        return ReplayOutcome(False, "a replay is already running; try again when it ends", {}, {}, {})
    try:
        return _replay(ctx)
    finally:
        _RUNNING.release()


def _replay(ctx: DashboardContext) -> ReplayOutcome:
    from diagnosis.replay import compare, replay
    from fleetguard.incidents.replay_source import history_rounds
    from fleetguard.settings.policy_files import load_policy

    config = ctx.config
    try:
        current = load_policy(config.diagnosis.policy_file or None, config.policy.tables)
        candidate = load_policy(config.dashboard.candidate_policy_file, config.policy.tables)
    except Exception as exc:  # a bad candidate is the operator's to fix: one line
        return ReplayOutcome(
            False, f"the candidate cannot be loaded: {type(exc).__name__}: {exc}", {}, {}, {}
        )
    end = ctx.now()
    begin = end - config.dashboard.replay_hours * 3600.0
    with ctx.cursor() as cur:
        a = replay(current, history_rounds(cur, begin, end, STEP_SECONDS), end)
        b = replay(candidate, history_rounds(cur, begin, end, STEP_SECONDS), end)
    hours = config.dashboard.replay_hours
    return ReplayOutcome(
        True, f"replayed the last {hours:g} h", compare(a, b).as_json(), a.summary(), b.summary()
    )
