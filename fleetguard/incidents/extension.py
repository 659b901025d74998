"""Incidents and alerts inside `fleetguard up`: the fleet controller's incidents task
(fleetguard.incidents.controller_task), run over the same store API in transactions of its own, with the
repairs it requests carried out here after each commit (evidence before action). A round runs as soon as
the agent stores new rows (a fault's records are flushed at once) and at least every diagnosis interval;
the relay thread sends the alerts."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import duckdb

from fleetguard.agent.agent import Agent
from fleetguard.agent.extension import Extension
from fleetguard.alerts.outbox import counts
from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import Clock
from fleetguard.config import Config
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.incidents.metrics import IncidentMetrics, IncidentSnapshot, open_counts
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.store import Store

log = logging.getLogger(__name__)


class IncidentSummary:
    """The status line's part: open incidents now."""

    def __init__(self) -> None:
        self.text = "incidents: starting"

    def describe(self) -> str:
        return self.text


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The task's writes, all or nothing (the controller's writer thread holds one the same way)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def carry_out_repairs(
    task: IncidentTask, executor: RepairExecutor, con: duckdb.DuckDBPyConnection, clock: Clock
) -> int:
    """The repairs the last round requested, each ended in the task (and stored) as it finishes."""
    done = 0
    for pending in task.pending_repairs:
        outcome, detail = executor.carry_out(pending.entry, pending.key, pending.summary)
        with transaction(con):
            task.action_finished(pending.entry.action_id, outcome, detail, clock.time())
        done += 1
    return done


def incidents_extension(config: Config, summary: IncidentSummary | None = None) -> Extension:
    stop = threading.Event()
    wake = threading.Event()
    threads: list[threading.Thread] = []
    metrics = IncidentMetrics()
    tasks: list[IncidentTask] = []

    def start(agent: Agent, store: Store) -> None:
        clock = agent.clock  # the daemon's: a FakeClock's when a test runs `up` in-process
        task = IncidentTask(config, clock)
        tasks.append(task)
        executor = RepairExecutor(config.diagnosis, slurm=config.actions.slurm)
        con = store.cursor()
        task.start_relay(store)
        agent.metrics.extra.append(metrics)
        agent.on_stored.append(wake.set)

        def loop() -> None:
            while not stop.is_set():
                wake.clear()
                try:
                    with transaction(con):
                        task(con, clock.time())
                    carry_out_repairs(task, executor, con, clock)
                    if task.service is not None:
                        _publish(task.service, task.relay, metrics, summary)
                except Exception as exc:  # one bad round must not end incident tracking
                    log.warning("incident round failed: %s", exc)
                clock.wait(wake, config.diagnosis.interval_seconds)

        threads.append(threading.Thread(target=loop, name="fleetguard-incidents", daemon=True))
        for thread in threads:
            thread.start()

    def stop_all() -> None:
        stop.set()
        wake.set()
        for task in tasks:
            task.pacer.hurry()  # a round under way stops resting: the join below is not held by its rests
        for thread in threads:
            thread.join(timeout=10)
        for task in tasks:
            task.stop_relay()

    return Extension("incidents", start, stop_all)


def _publish(
    service: IncidentService,
    relay: AlertRelay | None,
    metrics: IncidentMetrics,
    summary: IncidentSummary | None,
) -> None:
    active = service.engine.active()
    stats = relay.stats if relay is not None else None
    metrics.update(
        IncidentSnapshot(
            open_by=open_counts(active),
            sent=dict(stats.sent) if stats else {},
            failed=dict(stats.failed) if stats else {},
            dead=dict(stats.dead) if stats else {},
            silenced=dict(stats.silenced) if stats else {},
            endpoint_up={name: relay.health(name).up for name in relay.endpoints} if relay else {},
            outbox=counts(service.con),
            breaker_open=service.engine.breaker.tripped,
        )
    )
    if summary is not None:
        critical = sum(1 for i in active if i.severity.value == "critical")
        breaker = " BREAKER OPEN" if service.engine.breaker.tripped else ""
        summary.text = f"incidents {len(active)} ({critical} critical){breaker}"
