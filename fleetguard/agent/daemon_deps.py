"""What the daemon (`fleetguard agent`, `fleetguard up`) takes from its surroundings, as one object.

The process shell (fleetguard/agent/daemon.py) reaches the world through these parts only: the clock its
loops run on, the store it opens, the /metrics server, the signals that stop it, systemd and the process-wide
limits. `DaemonDeps.production()` is what the command line runs; a test swaps the clock for a FakeClock and
the signals for a `StopSwitch`, and runs `agent` or `up` in-process, round by round, as it moves time.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleetguard import stop_signals
from fleetguard.agent.agent import Waiter, wait_on_clock, wait_on_poll
from fleetguard.agent.limits import bound_malloc_arenas, bound_native_threads, raise_open_file_limit
from fleetguard.agent.metrics import MetricsState
from fleetguard.agent.metrics_http import serve_metrics
from fleetguard.clock import Clock, SystemClock
from fleetguard.config import Config
from fleetguard.httpserve import HttpServer
from fleetguard.sd_notify import Notifier

if TYPE_CHECKING:
    from fleetguard.agent.sink import Sink

StopHandler = Callable[[int, object], None]
"""Asks the daemon to stop: (signal number, frame), the shape of a signal handler."""

InstallStop = Callable[[StopHandler], Callable[[], None]]
"""Routes the stop requests to a handler; returns what puts the previous routing back."""


def open_local_store(config: Config) -> Sink:
    """The default sink: a local store at store.path. Loads DuckDB, so only when an agent keeps one."""
    from fleetguard.agent.local_sink import LocalStoreSink

    return LocalStoreSink.open(config.store.path)


def install_signal_handlers(handler: StopHandler) -> Callable[[], None]:
    """SIGTERM and SIGINT stop the daemon (the main thread only: Python delivers signals there); one that
    came while the process was starting is handed over at once (fleetguard/stop_signals.py)."""
    return stop_signals.route(handler)


def prepare_process() -> None:
    """Process-wide limits, set before anything imports numpy (whose BLAS starts a pool per core) and before
    local users' connections can take the descriptors the agent needs."""
    bound_native_threads()
    bound_malloc_arenas()  # before the agent starts its threads
    raise_open_file_limit()


@dataclass(frozen=True)
class DaemonDeps:
    clock: Clock
    wait: Waiter  # how the agent loop waits between rounds (fleetguard.agent.agent)
    open_sink: Callable[[Config], Sink]  # used when the caller hands the daemon no sink of its own
    serve_metrics: Callable[[MetricsState, str, int], HttpServer]  # (state, address, port)
    install_stop: InstallStop
    notifier: Callable[[], Notifier | None]  # systemd's notify socket, when run under one
    prepare_process: Callable[[], None]

    @staticmethod
    def production() -> DaemonDeps:
        return DaemonDeps(
            clock=SystemClock(),
            wait=wait_on_poll,
            open_sink=open_local_store,
            serve_metrics=serve_metrics,
            install_stop=install_signal_handlers,
            notifier=Notifier.from_environment,
            prepare_process=prepare_process,
        )

    @staticmethod
    def on_clock(clock: Clock, stop: StopSwitch) -> DaemonDeps:
        """In-process, for tests: loops wait on `clock`, `stop` stops the daemon (no signal handlers, so any
        thread may run it), no systemd, and the test process's limits left as they are. The store and the
        /metrics server stay real (give metrics_port 0)."""
        return DaemonDeps(
            clock=clock,
            wait=wait_on_clock(clock),
            open_sink=open_local_store,
            serve_metrics=serve_metrics,
            install_stop=stop.install,
            notifier=lambda: None,
            prepare_process=lambda: None,
        )


@dataclass
class StopSwitch:
    """Stops a daemon run with `DaemonDeps.on_clock`, as SIGTERM stops one run from the command line."""

    _handlers: list[StopHandler] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, handler: StopHandler) -> Callable[[], None]:
        with self._lock:
            self._handlers.append(handler)

        def restore() -> None:
            with self._lock:
                self._handlers.remove(handler)

        return restore

    def stop(self) -> None:
        with self._lock:
            handlers = list(self._handlers)
        for handler in handlers:
            handler(signal.SIGTERM, None)
