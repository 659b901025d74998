"""Restart by killing the worker group: SIGTERM, a grace period, then SIGKILL for whoever ignores SIGTERM."""

from __future__ import annotations

import os
import signal

from fleetguard.actions.terminate import terminate_group
from fleetguard.clock import SystemClock
from tests.runtime.helpers import sleeper


def test_a_process_that_honours_sigterm_is_terminated_not_killed() -> None:
    proc = sleeper()
    outcome = terminate_group([proc.pid], grace_seconds=2.0, clock=SystemClock())
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert (outcome.terminated, outcome.killed) == ([proc.pid], [])


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    proc = sleeper(ignore_sigterm=True)
    outcome = terminate_group([proc.pid], grace_seconds=0.3, clock=SystemClock())
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert (outcome.terminated, outcome.killed, outcome.ok) == ([], [proc.pid], True)


def test_a_stopped_process_is_continued_so_that_it_can_act_on_sigterm() -> None:
    proc = sleeper()
    os.kill(proc.pid, signal.SIGSTOP)
    outcome = terminate_group([proc.pid], grace_seconds=2.0, clock=SystemClock())
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert outcome.terminated == [proc.pid]


def test_the_whole_group_goes_including_a_mixed_one() -> None:
    polite, stubborn = sleeper(), sleeper(ignore_sigterm=True)
    outcome = terminate_group([polite.pid, stubborn.pid], grace_seconds=0.3, clock=SystemClock())
    assert polite.wait(timeout=5) == -signal.SIGTERM
    assert stubborn.wait(timeout=5) == -signal.SIGKILL
    assert outcome.terminated == [polite.pid] and outcome.killed == [stubborn.pid]


def test_a_pid_already_gone_is_reported_not_an_error() -> None:
    proc = sleeper()
    proc.kill()
    proc.wait()
    outcome = terminate_group([proc.pid], grace_seconds=0.1, clock=SystemClock())
    assert outcome.already_gone == [proc.pid] and outcome.ok
