"""Ctrl-C and SIGTERM from the first instant of the `fleetguard` process: kept until the command knows what
to do with them, never raised as a KeyboardInterrupt in the middle of opening a store or starting a thread.

A daemon (`up`, `agent`, `controller`) routes them to its own stop handler once it has one; a signal that
came before is handed to that handler at once, so the daemon stops as soon as it can instead of dying
half-started (a traceback, or threads that keep the process from exiting). Every other command gets
Python's default behaviour back before it runs (`release`), and a signal that came before ends it."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Final, NoReturn

StopHandler = Callable[[int, object], None]
"""Asks the daemon to stop: (signal number, frame), the shape of a signal handler."""

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C

_lock = threading.Lock()
_pending: list[int] = []  # signals received while held and not yet routed
_handler: list[StopHandler] = []  # the daemon's, once routed


def hold() -> None:
    """From now on SIGINT and SIGTERM are kept (the first thing `fleetguard` does, before any import)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _received)


def _received(signum: int, frame: object) -> None:
    with _lock:
        handler = _handler[-1] if _handler else None
        if handler is None:
            _pending.append(signum)
    if handler is not None:
        handler(signum, frame)


def pending() -> bool:
    """A stop signal came and no daemon handler has taken it yet."""
    with _lock:
        return bool(_pending)


def route(handler: StopHandler) -> Callable[[], None]:
    """Send SIGINT and SIGTERM to `handler` (on the main thread); one that came before is handed over now.
    Returns what puts the previous routing back."""
    previous = {s: signal.signal(s, _received) for s in STOP_SIGNALS}
    with _lock:
        _handler.append(handler)
        early = list(_pending)
        _pending.clear()
    for signum in early[:1]:
        handler(signum, None)

    def restore() -> None:
        with _lock:
            _handler.remove(handler)
        for s, old in previous.items():
            signal.signal(s, old)

    return restore


def release() -> None:
    """Python's own behaviour back (KeyboardInterrupt, termination), for a command that is not a daemon; a
    signal that came while held ends the process now, as it would have."""
    if signal.getsignal(signal.SIGINT) is not _received:
        return  # not held (the command line run in-process, by a test or a program): nothing to give back
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with _lock:
        early = list(_pending)
        _pending.clear()
    if early:
        sys.exit(EXIT_INTERRUPTED)


def exit_stopped(code: int) -> NoReturn:
    """End a daemon's process once it has stopped (its final flush stored, its store closed, its threads
    joined). What is left of a normal exit runs (atexit handlers, logging's flush, stdout and stderr), but
    not the interpreter's teardown of every module: with DuckDB, Dash, plotly and pandas loaded that frees
    millions of objects one by one, 0.5 s on an idle two-core host and over a second on a busy one, after
    everything was stored, and nobody waits for it. A thread still running that is not a daemon thread
    gets the normal exit, which waits for it; so does a command line run in-process (a test, a program),
    where the process is not ours to end."""
    held = signal.getsignal(signal.SIGINT) is _received
    if not held or any(t.is_alive() and not t.daemon for t in _other_threads()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a closed pipe: nothing to tell
            stream.flush()
    os._exit(code)


def _other_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread()]
