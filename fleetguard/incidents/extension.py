"""Incidents and alerts inside `fleetguard up`: every diagnosis interval the records the agent stored are
turned into incidents (with evidence, actions and outbox rows), and the relay thread sends the alerts."""

from __future__ import annotations

import logging
import threading

from fleetguard.agent.agent import Agent
from fleetguard.agent.extension import Extension
from fleetguard.alerts.outbox import counts
from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import SystemClock
from fleetguard.config import Config
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.metrics import IncidentMetrics, IncidentSnapshot, open_counts
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.rounds import incident_round
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store

log = logging.getLogger(__name__)


class IncidentSummary:
    """The status line's part: open incidents now."""

    def __init__(self) -> None:
        self.text = "incidents: starting"

    def describe(self) -> str:
        return self.text


def incidents_extension(config: Config, summary: IncidentSummary | None = None) -> Extension:
    stop = threading.Event()
    threads: list[threading.Thread] = []
    metrics = IncidentMetrics()

    def start(agent: Agent, store: Store) -> None:
        clock = SystemClock()
        policy = load_policy(config.diagnosis.policy_file or None, config.policy.tables)
        now = clock.time()
        webhooks = config.alerts.webhooks if config.alerts.enabled else ()
        service = IncidentService.open(
            store.cursor(), policy, now, webhooks=webhooks, executor=RepairExecutor(config.diagnosis)
        )
        # Events are stored up to the agent's dedup window late: read that far back on the first round too.
        overlap = config.agent.event_dedup_window_seconds + 2 * config.agent.flush_interval_seconds
        feed = StoreFeed(store.cursor(), start=now - overlap, event_overlap_seconds=overlap)
        relay = AlertRelay(store.cursor(), config.alerts, clock) if webhooks else None
        agent.metrics.extra.append(metrics)

        def loop() -> None:
            while not stop.is_set():
                try:
                    incident_round(
                        service, feed, relay, store.path, clock.time(), config.store.retention_days
                    )
                    _publish(service, relay, metrics, summary)
                except Exception as exc:  # one bad round must not end incident tracking
                    log.warning("incident round failed: %s", exc)
                stop.wait(config.diagnosis.interval_seconds)

        threads.append(threading.Thread(target=loop, name="fleetguard-incidents", daemon=True))
        if relay is not None:
            threads.append(
                threading.Thread(target=relay.run, args=(stop,), name="fleetguard-alerts", daemon=True)
            )
        for thread in threads:
            thread.start()

    def stop_all() -> None:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)

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
            outbox=counts(service.con),
            breaker_open=service.engine.breaker.tripped,
        )
    )
    if summary is not None:
        critical = sum(1 for i in active if i.severity.value == "critical")
        breaker = " BREAKER OPEN" if service.engine.breaker.tripped else ""
        summary.text = f"incidents {len(active)} ({critical} critical){breaker}"
