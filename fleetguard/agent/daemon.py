"""Process shell for `fleetguard agent` and `fleetguard up`: sink, /metrics server, signals, summary."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from collectors.protocol import Collector
from fleetguard.agent.agent import Agent, EventFolder, RoundReport, Schedule
from fleetguard.agent.daemon_deps import DaemonDeps
from fleetguard.agent.extension import Extension
from fleetguard.agent.metrics import MetricsState
from fleetguard.agent.sink import Sink
from fleetguard.clock import Clock
from fleetguard.config import Config
from fleetguard.httpserve import HttpServer
from fleetguard.sd_notify import Notifier, WatchdogPinger, slow_rounds_warning
from fleetguard.startup import StartupError, one_line, os_reason

if TYPE_CHECKING:
    # Types only: an agent whose sink keeps no store (it ships to a controller) never loads DuckDB.
    from fleetguard.store import Store

log = logging.getLogger(__name__)


@dataclass
class DaemonResult:
    rounds: int
    rows_written: dict[str, int]
    write_errors: int
    rejected_rows: int
    dropped_rows: int  # dropped oldest-first while the store failed and the buffer was full
    unstored_rows: int  # still buffered at shutdown, because the store failed: lost
    metrics_port: int
    extras: dict[str, Any] = field(default_factory=dict)


def run_daemon(
    config: Config,
    collectors: Sequence[Collector],
    folder: EventFolder | None,
    *,
    extensions: Sequence[Extension] = (),
    on_round: Callable[[RoundReport], None] | None = None,
    on_ready: Callable[[int], None] | None = None,
    duration_seconds: float | None = None,
    out: TextIO = sys.stdout,
    sink: Sink | None = None,
    deps: DaemonDeps | None = None,
) -> DaemonResult:
    """Run until SIGTERM/SIGINT (or `duration_seconds`), then flush everything and return a summary.

    Rows go to `sink` (chosen by the caller: the spool of an agent that ships to a controller, the
    controller's ingest inside `up`), by default a local store at store.path. The daemon owns the sink from
    here: it starts it and closes it after the final flush. `deps` is what it takes from the world (clock,
    store, /metrics server, signals, systemd): production's by default, a FakeClock's in tests."""
    deps = deps or DaemonDeps.production()
    deps.prepare_process()
    if sink is None:
        sink = deps.open_sink(config)
    buffer = sink.buffer
    systemd = deps.notifier()
    on_round = _with_watchdog(systemd, config, on_round)
    metrics = MetricsState()
    if sink.metrics is not None:
        metrics.extra.append(sink.metrics)
    try:
        server = _serve_metrics(config, metrics, deps)
    except BaseException:
        sink.close()
        raise
    sink.start()
    port = server.port
    agent = Agent(
        collectors,
        buffer,
        metrics,
        deps.clock,
        folder=folder,
        schedule=Schedule(
            sample_interval_seconds=config.agent.sample_interval_seconds,
            flush_interval_seconds=config.agent.flush_interval_seconds,
            retention_days=config.store.retention_days,
        ),
        apply_retention=sink.apply_retention,
        on_round=on_round,
        wait=deps.wait,
    )
    stop = threading.Event()
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)

    def request_stop(signum: int, _frame: object) -> None:
        stop.set()
        with contextlib.suppress(OSError):
            os.write(write_fd, b"x")

    restore_stop = deps.install_stop(request_stop)
    timer = _duration_timer(deps.clock, stop, duration_seconds, request_stop) if duration_seconds else None
    started: list[Extension] = []
    try:
        for ext in extensions:
            if stop.is_set():
                break  # stopped while starting (a Ctrl-C then): start nothing more, flush and end
            if _start_extension(ext, agent, sink.store, out):
                started.append(ext)
        if on_ready is not None:
            on_ready(port)
        if systemd is not None:
            systemd.ready(f"sampling; /metrics on port {port}")
        if timer is not None:
            timer.start()
        agent.run(stop, wakeup_fd=read_fd)
    finally:
        if systemd is not None:
            systemd.stopping()  # the final flush may take TimeoutStopSec; not a hang
        stop.set()  # the duration timer, if still waiting, ends now
        if timer is not None and timer.ident is not None:  # started
            timer.join()
        # Order matters: every extension stops accepting and hands over what it acknowledged, then the
        # final flush stores it.
        for ext in reversed(started):
            try:
                ext.stop()
            except Exception as exc:
                log.warning("stopping %s failed: %s", ext.name, exc)
        agent.shutdown()
        sink.close()
        server.stop()
        restore_stop()
        os.close(read_fd)
        os.close(write_fd)
        if systemd is not None:
            systemd.close()
    result = DaemonResult(
        rounds=metrics.stats.rounds,
        rows_written=dict(buffer.rows_written),
        write_errors=buffer.write_errors,
        rejected_rows=buffer.rejected_rows,
        dropped_rows=buffer.dropped_rows,
        unstored_rows=len(buffer),
        metrics_port=port,
        # Shipping: batches still spooled (sent at the next start), dropped because the spool was full.
        extras=sink.summary(),
    )
    out.write(json.dumps({"stopped": True, **result.__dict__}) + "\n")
    out.flush()
    return result


def _with_watchdog(
    systemd: Notifier | None, config: Config, on_round: Callable[[RoundReport], None] | None
) -> Callable[[RoundReport], None] | None:
    """`on_round`, plus a watchdog ping after each sampling round when systemd asked for one (WatchdogSec):
    only a loop that completes rounds keeps the agent from being restarted."""
    if systemd is None or systemd.watchdog_seconds is None:
        return on_round
    warning = slow_rounds_warning(systemd.watchdog_seconds, config.agent.sample_interval_seconds)
    if warning:
        log.warning("%s", warning)
    pinger = WatchdogPinger(systemd)

    def round_done(report: RoundReport) -> None:
        pinger.on_round()
        if on_round is not None:
            on_round(report)

    return round_done


def _duration_timer(
    clock: Clock, stop: threading.Event, seconds: float, request_stop: Callable[[int, object], None]
) -> threading.Thread:
    """`--duration`: stop after `seconds` on the daemon's clock (a FakeClock's in tests), unless stopped."""

    def run() -> None:
        if not clock.wait(stop, seconds):
            request_stop(0, None)

    return threading.Thread(target=run, name="fleetguard-duration", daemon=True)


def _serve_metrics(config: Config, metrics: MetricsState, deps: DaemonDeps) -> HttpServer:
    address, port = config.agent.metrics_address, config.agent.metrics_port
    try:
        return deps.serve_metrics(metrics, address, port)
    except OSError as exc:
        taken = exc.errno == errno.EADDRINUSE
        hint = " (choose another with --metrics-port PORT; 0: any free one)" if taken else ""
        raise StartupError(
            f"cannot serve /metrics on {address} port {port} (agent.metrics_address, agent.metrics_port): "
            f"{os_reason(exc)}{hint}"
        ) from exc


def _start_extension(ext: Extension, agent: Agent, store: Store | None, out: TextIO) -> bool:
    """Start one extension; False if an optional one failed (noted), StartupError if a required one did."""
    try:
        if store is not None:
            ext.start(agent, store)
        elif ext.start_without_store is not None:
            ext.start_without_store(agent)
        else:
            raise RuntimeError("it reads the local store, and an agent that ships to a controller keeps none")
    except Exception as exc:
        reason = os_reason(exc) if isinstance(exc, OSError) else one_line(str(exc))
        if ext.key:
            switch = f" ({ext.off_switch} runs without it)" if ext.off_switch else ""
            switch = f" ({ext.hint})" if ext.hint and isinstance(exc, OSError) else switch
            raise StartupError(f"{ext.key}: the {ext.name} cannot start: {reason}{switch}") from exc
        # An optional part (live scoring) must not keep the agent from sampling.
        log.error("%s is off: %s", ext.name, reason)
        out.write(f"  note      {ext.name} is off: {reason}\n")
        return False
    return True
