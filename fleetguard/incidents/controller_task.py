"""Incidents on the fleet controller: a periodic task for its writer thread, which calls it inside a store
transaction it holds. Wiring (fleetguard.controller):

    task = IncidentTask(config)
    writer.every(config.diagnosis.interval_seconds, "incidents", task)
    relay = task.start_relay(store)          # its own thread and connection; None without webhooks
    ... at shutdown: task.stop_relay()

Repairs are not run on the writer thread: `change.actions` with outcome REQUESTED are for the controller to
turn into host commands, and it reports their end with `task.action_finished(...)` from the same thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import duckdb

from diagnosis.incident import ActionEntry, ActionOutcome, IncidentChange
from diagnosis.model import IncidentKey
from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import Clock, SystemClock
from fleetguard.config import Config
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.rounds import incident_round
from fleetguard.incidents.service import IncidentService
from fleetguard.pacing import Pacer
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store


@dataclass(frozen=True, slots=True)
class PendingRepair:
    """A repair an incident asked for and nobody has carried out yet."""

    entry: ActionEntry
    key: IncidentKey
    summary: str


def _requested(changes: list[IncidentChange], restored: IncidentService | None) -> list[PendingRepair]:
    out: list[PendingRepair] = []
    seen: set[str] = set()
    if restored is not None:
        engine = restored.engine
        for incident in engine.active():
            entry = engine.actions.get(incident.incident_id)
            if entry is not None:
                out.append(PendingRepair(entry, incident.key, incident.summary))
    out += [PendingRepair(e, c.incident.key, c.incident.summary) for c in changes for e in c.actions]
    pending = []
    for p in out:
        if p.entry.outcome is not ActionOutcome.REQUESTED or p.entry.finished_at is not None:
            continue
        if p.entry.action_id not in seen:
            seen.add(p.entry.action_id)
            pending.append(p)
    return pending


# Of its interval, what a round may spend resting so the request handlers go first (fleetguard.pacing): a
# round that needs more of the interpreter than the handlers leave it ends within the rest of its interval.
REST_SHARE_OF_INTERVAL = 0.5


class IncidentTask:
    def __init__(self, config: Config, clock: Clock | None = None, pacer: Pacer | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.pacer = pacer or Pacer()
        self.policy = load_policy(config.diagnosis.policy_file or None, config.policy.tables)
        self.service: IncidentService | None = None
        self.feed: StoreFeed | None = None
        self.relay: AlertRelay | None = None
        self.last_changes: list[IncidentChange] = []
        self.pending_repairs: list[PendingRepair] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        """One incident round. `pending_repairs` then holds what it asked for: the REQUESTED actions of
        its changes and, on the first round after a start, those the store kept unfinished from before
        (requested just before a restart: nothing else would ever carry them out)."""
        restored = self.service is None
        if self.service is None or self.feed is None:
            webhooks = self.config.alerts.webhooks if self.config.alerts.enabled else ()
            self.service = IncidentService.open(
                con, self.policy, now, webhooks=webhooks, own_transactions=False
            )
            rules = self.service.engine.rules
            # The feed judges which hosts are steady by the rules it feeds (their policy is fixed for the
            # task's life): a lower threshold here than theirs would hide a warning.
            self.feed = StoreFeed.open(
                con,
                telling_counters=frozenset(rules.policy.counters),
                temperature_warn=rules.policy.gpu.temperature_warn_celsius,
            )
            self.feed.pace = rules.pace = self.pacer.rest
            # The rules' per-GPU state as the rows handed on before a restart left it.
            self.service.engine.heard(self.feed.restore_rules(rules), now)
        self.pacer.start(REST_SHARE_OF_INTERVAL * self.config.diagnosis.interval_seconds)
        # The controller turns REQUESTED actions of these changes into host commands.
        self.last_changes = incident_round(
            self.service, self.feed, self.relay, self.config.store.path, now, self.config.store.retention_days
        )
        self.pending_repairs = _requested(self.last_changes, self.service if restored else None)

    def action_finished(self, action_id: str, outcome: ActionOutcome, detail: str, now: float) -> None:
        """A host command that carried out a requested repair ended (call inside a writer transaction)."""
        if self.service is not None:
            self.service.apply(self.service.engine.action_finished(action_id, outcome, detail, now), now)

    def start_relay(self, store: Store) -> AlertRelay | None:
        if not (self.config.alerts.enabled and self.config.alerts.webhooks):
            return None
        self.relay = AlertRelay(store.cursor(), self.config.alerts, self.clock)
        self._thread = threading.Thread(target=self.relay.run, args=(self._stop,), name="fleetguard-alerts")
        self._thread.daemon = True
        self._thread.start()
        return self.relay

    def stop_relay(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
