"""Ctrl-C held from the first instant of `fleetguard`: handed to a daemon's stop once it routes signals,
and ending any other command when released (fleetguard/stop_signals.py). Real signals to this process."""

from __future__ import annotations

import os
import signal
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
