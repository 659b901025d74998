"""Ctrl-C held from the first instant of `fleetguard`: handed to a daemon's stop once it routes signals,
and ending any other command when released (fleetguard/stop_signals.py). Real signals to this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from fleetguard import stop_signals


@pytest.fixture
def held() -> Iterator[None]:
    previous = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
    stop_signals.hold()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_a_signal_before_the_daemon_routes_is_kept_then_handed_to_its_stop(held: None) -> None:
    os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: held
    assert stop_signals.pending()
    got: list[int] = []
    restore = stop_signals.route(lambda signum, _frame: got.append(signum))
    try:
        assert got == [signal.SIGINT]
        assert not stop_signals.pending()
        os.kill(os.getpid(), signal.SIGTERM)  # once routed, each signal goes straight to the daemon
        assert got == [signal.SIGINT, signal.SIGTERM]
    finally:
        restore()


def test_a_command_that_is_no_daemon_ends_on_a_signal_that_came_while_held(held: None) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as ended:
        stop_signals.release()
    assert ended.value.code == stop_signals.EXIT_INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_release_without_hold_changes_nothing() -> None:
    before = signal.getsignal(signal.SIGINT)
    stop_signals.release()
    assert signal.getsignal(signal.SIGINT) is before


_STOPPED_DAEMON = """
import atexit, sys, threading
from fleetguard import stop_signals
stop_signals.hold()
atexit.register(lambda: sys.stdout.write("atexit ran;"))
{extra}
sys.stdout.write("buffered;")  # not flushed yet: exit_stopped must flush it
stop_signals.exit_stopped(3)
"""


def _run_stopped_daemon(extra: str = "") -> subprocess.CompletedProcess[str]:
    code = _STOPPED_DAEMON.format(extra=extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_stopped_daemon_exits_with_its_code_after_atexit_and_flushed_output() -> None:
    done = _run_stopped_daemon()
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered;atexit ran;"
    assert done.stderr == ""


def test_a_stopped_daemon_still_waits_for_a_thread_that_is_not_a_daemon_thread() -> None:
    # The thread is let go only by the interpreter's own shutdown (threading's exit hooks run just before it
    # joins such threads): under os._exit it would never write.
    extra = (
        "go = threading.Event()\n"
        "t = threading.Thread(target=lambda: (go.wait(), sys.stdout.write('thread done;')))\n"
        "t.start()\n"
        "threading._register_atexit(go.set)\n"
    )
    done = _run_stopped_daemon(extra)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered;thread done;atexit ran;"


def test_exit_stopped_in_process_is_an_ordinary_exit() -> None:
    """Run in-process (a test, a program), the process is not the command's to end: SystemExit."""
    with pytest.raises(SystemExit) as ended:
        stop_signals.exit_stopped(4)
    assert ended.value.code == 4
