"""Restart by killing the worker group: SIGTERM, a grace period, then SIGKILL for whoever ignores SIGTERM."""

from __future__ import annotations

import os
import signal
import time

from fleetguard.actions.terminate import terminate_group
from fleetguard.clock import SystemClock
from fleetguard.jobcontrol.trust import ProcessIdentity, identify
from tests.runtime.helpers import sleeper

UID = os.getuid()


def ident(pid: int) -> ProcessIdentity:
    found = identify(pid)
    assert found is not None
    return found


def test_a_process_that_honours_sigterm_is_terminated_not_killed() -> None:
    proc = sleeper()
    outcome = terminate_group([ident(proc.pid)], UID, grace_seconds=2.0, clock=SystemClock())
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert (outcome.terminated, outcome.killed) == ([proc.pid], [])


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    proc = sleeper(ignore_sigterm=True)
    outcome = terminate_group([ident(proc.pid)], UID, grace_seconds=0.3, clock=SystemClock())
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert (outcome.terminated, outcome.killed, outcome.ok) == ([], [proc.pid], True)


def test_a_stopped_process_is_continued_so_that_it_can_act_on_sigterm() -> None:
    proc = sleeper()
    os.kill(proc.pid, signal.SIGSTOP)
    outcome = terminate_group([ident(proc.pid)], UID, grace_seconds=2.0, clock=SystemClock())
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert outcome.terminated == [proc.pid]


def test_the_whole_group_goes_including_a_mixed_one() -> None:
    polite, stubborn = sleeper(), sleeper(ignore_sigterm=True)
    outcome = terminate_group(
        [ident(polite.pid), ident(stubborn.pid)], UID, grace_seconds=0.3, clock=SystemClock()
    )
    assert polite.wait(timeout=5) == -signal.SIGTERM
    assert stubborn.wait(timeout=5) == -signal.SIGKILL
    assert outcome.terminated == [polite.pid] and outcome.killed == [stubborn.pid]


def test_a_pid_already_gone_is_reported_not_an_error() -> None:
    proc = sleeper()
    gone = ident(proc.pid)
    proc.kill()
    proc.wait()
    outcome = terminate_group([gone], UID, grace_seconds=0.1, clock=SystemClock())
    assert outcome.already_gone == [proc.pid] and outcome.ok


def test_the_data_loader_children_in_a_workers_group_go_with_it() -> None:
    code = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\ntime.sleep(60)\n"
    )
    import subprocess
    import sys

    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert worker.stdout is not None
    child_pid = int(worker.stdout.readline())
    outcome = terminate_group([ident(worker.pid)], UID, grace_seconds=2.0, clock=SystemClock())
    assert worker.wait(timeout=5) == -signal.SIGTERM and outcome.ok
    worker.stdout.close()
    deadline = time.monotonic() + 30
    while identify(child_pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # the SIGTERM is delivered; its exit is the kernel's to finish
    assert identify(child_pid) is None  # gone too (reaped by init, or a zombie until then)


def test_a_target_that_is_not_the_owners_is_refused_and_left_running() -> None:
    proc = sleeper()
    try:
        outcome = terminate_group([ident(proc.pid)], UID + 1, grace_seconds=0.1, clock=SystemClock())
        assert outcome.refused == [proc.pid] and not outcome.ok
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
