"""The PID watcher knows a dead process within a second, once, with its exit code where /proc still has it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fleetguard.jobcontrol.procfs import decode_wait_status, is_alive, parse_stat, pidfd_exit_code
from fleetguard.runtime.pid_watcher import PidWatcher, ProcessExit
from tests.runtime.helpers import sleeper


def wait_for_exits(watcher: PidWatcher, seconds: float) -> tuple[list[ProcessExit], float]:
    """Drive the watcher like its thread does (poll with a timeout) until something exits or time runs out."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        exits = watcher.check_once(timeout_seconds=0.2)
        if exits:
            return exits, time.monotonic() - start
    return [], time.monotonic() - start


def test_a_killed_child_is_reported_within_a_second_with_its_signal() -> None:
    proc = sleeper()
    watcher = PidWatcher(lambda e: None)
    assert watcher.watch(proc.pid, ("job", 2))
    os.kill(proc.pid, signal.SIGKILL)  # not reaped: a zombie, as a torchrun worker is before torchrun polls
    exits, seconds = wait_for_exits(watcher, 2.0)
    proc.wait()
    assert [(e.pid, e.key) for e in exits] == [(proc.pid, ("job", 2))]
    assert exits[0].exit_code == -signal.SIGKILL
    assert seconds < 1.0


def test_polling_without_pidfd_also_sees_the_exit_within_a_second() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    watcher = PidWatcher(lambda e: None, poll_interval_seconds=0.2, use_pidfd=False)
    watcher.watch(proc.pid, ("job", 0))
    exits, _ = wait_for_exits(watcher, 3.0)
    assert [e.pid for e in exits] == [proc.pid]
    assert exits[0].exit_code == 0
    proc.wait()


def test_an_exit_is_reported_once() -> None:
    seen: list[ProcessExit] = []
    proc = sleeper()
    watcher = PidWatcher(seen.append)
    watcher.watch(proc.pid, ("job", 0))
    proc.kill()
    proc.wait()  # reaped: gone from /proc entirely
    wait_for_exits(watcher, 2.0)
    watcher.check_once()
    assert [e.pid for e in seen] == [proc.pid]
    assert watcher.watched() == {}


def test_a_stopped_process_is_alive() -> None:
    proc = sleeper()
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        watcher = PidWatcher(lambda e: None)
        watcher.watch(proc.pid, ("job", 0))
        assert watcher.check_once(timeout_seconds=0.1) == []
        assert is_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_watching_a_pid_that_is_already_gone_says_so() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert PidWatcher(lambda e: None).watch(proc.pid, ("job", 0)) is False


def test_the_watcher_thread_calls_back_and_survives_a_failing_callback() -> None:
    calls: list[int] = []

    def callback(process_exit: ProcessExit) -> None:
        calls.append(process_exit.pid)
        raise RuntimeError("callback bug")

    watcher = PidWatcher(callback, poll_interval_seconds=0.05)
    watcher.start()
    try:
        first, second = sleeper(), sleeper()
        watcher.watch(first.pid, ("job", 0))
        watcher.watch(second.pid, ("job", 1))
        first.kill()
        second.kill()
        first.wait()
        second.wait()
        deadline = time.monotonic() + 3
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting on a real thread, bounded
    finally:
        watcher.stop()
    assert sorted(calls) == sorted([first.pid, second.pid])
    assert watcher.callback_errors == 2


def test_stat_parsing_survives_parentheses_in_the_command_name() -> None:
    fields = ["Z"] + ["0"] * 18 + ["12345"] + ["0"] * 29 + ["9"]
    state = parse_stat("77 (we(ird) name) " + " ".join(fields))
    assert state is not None
    assert (state.state, state.start_ticks, state.exit_code) == ("Z", 12345, -9)


def test_wait_status_decoding() -> None:
    assert decode_wait_status(3 << 8) == 3
    assert decode_wait_status(signal.SIGTERM) == -signal.SIGTERM


def test_in_one_round_a_sigterm_teardown_is_reported_after_the_failure_it_follows() -> None:
    victim, bystander = sleeper(), sleeper()
    watcher = PidWatcher(lambda e: None)
    watcher.watch(bystander.pid, ("job", 0))  # registered first
    watcher.watch(victim.pid, ("job", 1))
    os.kill(victim.pid, signal.SIGKILL)
    os.kill(bystander.pid, signal.SIGTERM)
    victim.wait()  # reaped: exit code unknown to /proc
    os.waitid(os.P_PID, bystander.pid, os.WEXITED | os.WNOWAIT)  # dead, still a zombie with its code
    exits = watcher._collect_exits()
    bystander.wait()
    assert [e.key for e in exits] == [("job", 1), ("job", 0)]


def _kernel_keeps_exits() -> bool:
    """Whether pidfds tell a reaped process's exit here (PIDFD_INFO_EXIT, Linux >= 6.15)."""
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    pidfd = os.pidfd_open(proc.pid)
    try:
        proc.wait()
        return pidfd_exit_code(pidfd) == 7
    finally:
        os.close(pidfd)


@pytest.mark.skipif(not _kernel_keeps_exits(), reason="the kernel keeps no exit for a pidfd (Linux < 6.15)")
def test_a_rank_its_parent_reaped_before_the_watcher_looked_still_has_its_exit_code() -> None:
    # torchrun reaps its workers on its own schedule (every --monitor-interval): on a loaded machine it may
    # do so before the watcher reads the zombie's /proc entry, which then says nothing.
    exited = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(3)"])
    killed = sleeper()
    watcher = PidWatcher(lambda e: None)
    assert watcher.watch(exited.pid, ("job", 0)) and watcher.watch(killed.pid, ("job", 1))
    pidfd = os.pidfd_open(killed.pid)
    try:
        assert pidfd_exit_code(pidfd) is None  # running: nothing to say yet
        killed.kill()
        assert (exited.wait(timeout=30), killed.wait(timeout=30)) == (3, -signal.SIGKILL)  # reaped first
        assert pidfd_exit_code(pidfd) == -signal.SIGKILL
    finally:
        os.close(pidfd)
    exits = watcher.check_once(timeout_seconds=0.0)
    assert sorted((e.key[1], e.exit_code) for e in exits) == [(0, 3), (1, -signal.SIGKILL)]
