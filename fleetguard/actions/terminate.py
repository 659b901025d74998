"""Stop a local worker group the way torchrun expects a failure: SIGTERM, a grace period, then SIGKILL.

torchrun starts every worker in its own session, so a worker's process group also holds its data-loader
children; a stopped (SIGSTOP) worker gets SIGCONT so that it can act on the SIGTERM. Every signal goes through
`trust.signal_owned`: only processes of the job's owner, checked on a pidfd when the signal is sent."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetguard.clock import Clock
from fleetguard.jobcontrol.trust import (
    ProcessIdentity,
    SignalResult,
    group_members,
    is_running,
    signal_owned,
)

POLL_SECONDS = 0.05


@dataclass
class TerminateOutcome:
    terminated: list[int] = field(default_factory=list)  # exited after SIGTERM
    killed: list[int] = field(default_factory=list)  # needed SIGKILL
    already_gone: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)  # no longer the owner's process: never signalled
    survivors: list[int] = field(default_factory=list)  # still alive after SIGKILL (should not happen)

    @property
    def ok(self) -> bool:
        return not self.survivors and not self.refused

    def describe(self) -> str:
        text = (
            f"terminated={self.terminated} killed={self.killed} already_gone={self.already_gone} "
            f"survivors={self.survivors}"
        )
        return text + (f" refused={self.refused} (not the job owner's process)" if self.refused else "")


def send(target: ProcessIdentity, owner_uid: int, sig: signal.Signals) -> SignalResult:
    """Signal `target` and the members of the process group it leads; the result for `target` itself."""
    result = SignalResult.GONE
    for member in group_members(target):
        sent = signal_owned(member, owner_uid, sig)
        if member.pid == target.pid:
            result = sent
    return result


def terminate_group(
    targets: Sequence[ProcessIdentity],
    owner_uid: int,
    grace_seconds: float,
    clock: Clock,
    alive: Callable[[ProcessIdentity], bool] = is_running,
) -> TerminateOutcome:
    """SIGTERM (+SIGCONT) every target, wait up to `grace_seconds` for all to exit, SIGKILL the rest."""
    outcome = TerminateOutcome()
    pending: list[ProcessIdentity] = []
    for target in targets:
        result = send(target, owner_uid, signal.SIGTERM) if alive(target) else SignalResult.GONE
        if result is SignalResult.SENT:
            send(target, owner_uid, signal.SIGCONT)
            pending.append(target)
        elif result is SignalResult.REFUSED:
            outcome.refused.append(target.pid)
        else:
            outcome.already_gone.append(target.pid)
    pending = _wait(pending, outcome.terminated, clock.monotonic() + grace_seconds, clock, alive)
    for target in pending:
        send(target, owner_uid, signal.SIGKILL)
    pending = _wait(pending, outcome.killed, clock.monotonic() + 5.0, clock, alive)
    outcome.survivors.extend(t.pid for t in pending)
    return outcome


def _wait(
    pending: list[ProcessIdentity],
    exited: list[int],
    deadline: float,
    clock: Clock,
    alive: Callable[[ProcessIdentity], bool],
) -> list[ProcessIdentity]:
    """Poll until every pending process has exited or the deadline passes; the exited go to `exited`."""
    while pending:
        still = [t for t in pending if alive(t)]
        exited.extend(t.pid for t in pending if t not in still)
        pending = still
        if not pending or clock.monotonic() >= deadline:
            break
        clock.sleep(POLL_SECONDS)
    return pending
