"""Process shell for `fleetguard agent` and `fleetguard up`: store, /metrics server, signals, summary."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from prometheus_client import CollectorRegistry, start_http_server

from collectors.protocol import Collector
from fleetguard.agent.agent import Agent, EventFolder, RoundReport, Schedule
from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import SystemClock
from fleetguard.config import Config
from fleetguard.store import Store

log = logging.getLogger(__name__)


@dataclass
class Extension:
    """Something `up` runs beside the agent (training runtime, live scoring): started after the agent is
    ready with a function that hands records to the store, stopped before the final flush."""

    name: str
    start: Callable[[Agent, Store], None]  # the store is for reads (on its thread: store.cursor())
    stop: Callable[[], None]


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
) -> DaemonResult:
    """Run until SIGTERM/SIGINT (or `duration_seconds`), then flush everything and return a summary."""
    store = Store.open(config.store.path)
    rejected = Path(config.store.path + ".rejected.jsonl") if config.store.path != ":memory:" else None
    buffer = WriteBuffer(store, rejected)
    metrics = MetricsState()
    registry = CollectorRegistry(auto_describe=True)
    registry.register(metrics)
    server, server_thread = start_http_server(
        config.agent.metrics_port, addr=config.agent.metrics_address, registry=registry
    )
    port = int(server.server_address[1])
    agent = Agent(
        collectors,
        buffer,
        metrics,
        SystemClock(),
        folder=folder,
        schedule=Schedule(
            sample_interval_seconds=config.agent.sample_interval_seconds,
            flush_interval_seconds=config.agent.flush_interval_seconds,
            retention_days=config.store.retention_days,
        ),
        apply_retention=lambda days: store.apply_retention(days),
        on_round=on_round,
    )
    stop = threading.Event()
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)

    def request_stop(signum: int, _frame: object) -> None:
        stop.set()
        with contextlib.suppress(OSError):
            os.write(write_fd, b"x")

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    timer = threading.Timer(duration_seconds, request_stop, (0, None)) if duration_seconds else None
    started: list[Extension] = []
    try:
        for ext in extensions:
            try:
                ext.start(agent, store)
            except Exception as exc:
                # An optional part (training runtime, scoring) must not keep the agent from sampling.
                log.error("%s is off: %s", ext.name, exc)
                out.write(f"  note      {ext.name} is off: {exc}\n")
                continue
            started.append(ext)
        if on_ready is not None:
            on_ready(port)
        if timer is not None:
            timer.daemon = True
            timer.start()
        agent.run(stop, wakeup_fd=read_fd)
    finally:
        if timer is not None:
            timer.cancel()
        for ext in reversed(started):
            try:
                ext.stop()
            except Exception as exc:
                log.warning("stopping %s failed: %s", ext.name, exc)
        agent.shutdown()
        server.shutdown()
        server.server_close()
        server_thread.join(timeout=5)
        store.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.close(read_fd)
        os.close(write_fd)
    result = DaemonResult(
        rounds=metrics.stats.rounds,
        rows_written=dict(buffer.rows_written),
        write_errors=buffer.write_errors,
        rejected_rows=buffer.rejected_rows,
        dropped_rows=buffer.dropped_rows,
        unstored_rows=len(buffer),
        metrics_port=port,
    )
    out.write(json.dumps({"stopped": True, **result.__dict__}) + "\n")
    out.flush()
    return result
