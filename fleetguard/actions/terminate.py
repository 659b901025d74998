"""Stop a local worker group the way torchrun expects a failure: SIGTERM, a grace period, then SIGKILL.

torchrun starts every worker in its own session, so a worker's process group also holds its data-loader
children; a stopped (SIGSTOP) worker gets SIGCONT so that it can act on the SIGTERM."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetguard.clock import Clock
from fleetguard.runtime.procfs import is_alive

POLL_SECONDS = 0.05


@dataclass
class TerminateOutcome:
    terminated: list[int] = field(default_factory=list)  # exited after SIGTERM
    killed: list[int] = field(default_factory=list)  # needed SIGKILL
    already_gone: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)  # still alive after SIGKILL (should not happen)

    @property
    def ok(self) -> bool:
        return not self.survivors

    def describe(self) -> str:
        return (
            f"terminated={self.terminated} killed={self.killed} already_gone={self.already_gone} "
            f"survivors={self.survivors}"
        )


def send(pid: int, sig: signal.Signals) -> bool:
    """Signal `pid`'s process group if it leads one, else the process; False if it is gone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def terminate_group(
    pids: Sequence[int],
    grace_seconds: float,
    clock: Clock,
    alive: Callable[[int], bool] = is_alive,
) -> TerminateOutcome:
    """SIGTERM (+SIGCONT) every pid, wait up to `grace_seconds` for all to exit, SIGKILL the rest."""
    outcome = TerminateOutcome()
    pending: list[int] = []
    for pid in pids:
        if alive(pid) and send(pid, signal.SIGTERM):
            send(pid, signal.SIGCONT)
            pending.append(pid)
        else:
            outcome.already_gone.append(pid)
    deadline = clock.monotonic() + grace_seconds
    while pending:
        still = [pid for pid in pending if alive(pid)]
        outcome.terminated.extend(pid for pid in pending if pid not in still)
        pending = still
        if not pending or clock.monotonic() >= deadline:
            break
        clock.sleep(POLL_SECONDS)
    for pid in pending:
        send(pid, signal.SIGKILL)
    kill_deadline = clock.monotonic() + 5.0
    while pending and clock.monotonic() < kill_deadline:
        still = [pid for pid in pending if alive(pid)]
        outcome.killed.extend(pid for pid in pending if pid not in still)
        pending = still
        if pending:
            clock.sleep(POLL_SECONDS)
    outcome.survivors.extend(pending)
    return outcome
