"""The incident service: the engine plus its I/O. Each round's changes, their evidence and their alerts are
stored in one transaction before any repair runs (evidence before action); repairs are carried out after,
and their outcomes stored in the next transaction.

Where it runs: `fleetguard.incidents.controller_task.IncidentTask`, inside transactions its caller holds: the
fleet controller's writer thread, and `fleetguard up` (fleetguard.incidents.extension), which carries out
the requested repairs after each commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import duckdb

from diagnosis.breaker import BreakerHeadroom, counting_horizon
from diagnosis.engine import IncidentEngine
from diagnosis.incident import ActionOutcome, IncidentChange
from diagnosis.policy import Policy
from diagnosis.rules import Signals
from fleetguard.alerts.outbox import outbox_rows
from fleetguard.incidents.evidence import capture_many
from fleetguard.incidents.incident_store import EvidenceRow, IncidentStore
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.soft_state import load_soft_state, save_soft_state
from fleetguard.settings.alerts import WebhookConfig
from fleetguard.store.repair_tables import recent_returns

log = logging.getLogger(__name__)

MAX_EVIDENCE_CAPTURES = 5  # openings of one incident whose evidence is kept (the first and 4 returns)
# The breaker's headroom is stored when it changes, and at least this often while rounds run, so what
# `fleetguard breaker status` reads is never older than this (one row: no write per quiet round).
HEADROOM_REFRESH_SECONDS = 60.0


class IncidentService:
    def __init__(
        self,
        engine: IncidentEngine,
        con: duckdb.DuckDBPyConnection,
        webhooks: Sequence[WebhookConfig] = (),
        executor: RepairExecutor | None = None,
        own_transactions: bool = True,
    ) -> None:
        self.engine = engine
        self.con = con
        self.store = IncidentStore(con, own_transactions)
        self.webhooks = tuple(webhooks)
        self.executor = executor
        self.next_prune_at = 0.0
        self._headroom: BreakerHeadroom | None = None
        self._headroom_at = -HEADROOM_REFRESH_SECONDS

    @classmethod
    def open(
        cls,
        con: duckdb.DuckDBPyConnection,
        policy: Policy,
        now: float,
        webhooks: Sequence[WebhookConfig] = (),
        executor: RepairExecutor | None = None,
        own_transactions: bool = True,
    ) -> IncidentService:
        """An engine that takes up the incidents, actions and breaker state the store holds.

        `own_transactions=False` when every call comes inside a transaction the caller holds on `con`."""
        restored = IncidentStore(con).restore(
            now, policy.escalation.window_seconds, counting_horizon(policy.breaker)
        )
        engine = IncidentEngine(policy, restored.breaker)
        engine.restore(restored.incidents, restored.actions, restored.history)
        load_soft_state(con, engine)
        return cls(engine, con, webhooks, executor, own_transactions)

    def round(self, signals: Signals, now: float) -> list[IncidentChange]:
        # Repairs that returned a host lately: the same fault back within the window did not hold.
        self.engine.returned = recent_returns(self.con, now - self.engine.policy.escalation.window_seconds)
        changes = self.engine.observe(signals, now)
        self.apply(changes, now)
        save_soft_state(self.con, self.engine)
        self._save_headroom(now)
        return changes

    def _save_headroom(self, now: float, *, force: bool = False) -> None:
        headroom = self.engine.breaker_headroom(now)
        if force or headroom != self._headroom or now - self._headroom_at >= HEADROOM_REFRESH_SECONDS:
            # A service that has heard no host yet (`breaker reset` on a free store, before any round) knows
            # the counts but not the fleet: the fleet last weighed stays.
            self.store.save_headroom(headroom, now, counts_only=headroom.fleet_hosts == 0)
            self._headroom, self._headroom_at = headroom, now

    def apply(self, changes: Sequence[IncidentChange], now: float) -> None:
        """Store changes (with evidence and alerts), then carry out the repairs they requested."""
        if not changes:
            return
        # A fault that keeps coming back has told its story: bounded evidence per incident.
        opened = [c for c in changes if c.opened and c.incident.returns < MAX_EVIDENCE_CAPTURES]
        evidence: list[EvidenceRow] = capture_many(self.con, opened, now) if opened else []
        alerts = outbox_rows(changes, self.webhooks, now)
        self.store.persist(changes, evidence, alerts, self.engine.breaker.state, now)
        self._repair(changes, now)

    def _repair(self, changes: Sequence[IncidentChange], now: float) -> None:
        if self.executor is None:
            return
        finished: list[IncidentChange] = []
        for change in changes:
            for entry in change.actions:
                if entry.outcome is not ActionOutcome.REQUESTED or entry.finished_at is not None:
                    continue
                outcome, detail = self.executor.carry_out(entry, change.incident.key, change.incident.summary)
                finished.extend(self.engine.action_finished(entry.action_id, outcome, detail, now))
        if finished:
            self.store.persist(
                finished, (), outbox_rows(finished, self.webhooks, now), self.engine.breaker.state, now
            )

    def prune(self, now: float, retention_days: float) -> None:
        """Bound the incident and alert tables: what ended more than the retention ago goes (the escalation
        window's openings, and the ledger lines the breaker still weighs, are kept whatever the retention)."""
        policy = self.engine.policy
        keep = max(
            retention_days * 86400.0, policy.escalation.window_seconds, counting_horizon(policy.breaker)
        )
        self.store.prune(now - keep)

    def resolve(self, incident_id: str, now: float) -> bool:
        changes = self.engine.resolve(incident_id, now)
        self.apply(changes, now)
        return bool(changes)

    def reset_breaker(self, now: float, process_backlog: bool) -> list[IncidentChange]:
        """Close the breaker (stored even when no incident changes with it); the changes, whose requested
        repairs a caller without an executor carries out (the controller, `up`)."""
        changes = self.engine.reset_breaker(now, process_backlog)
        self.store.persist(
            changes, (), outbox_rows(changes, self.webhooks, now), self.engine.breaker.state, now
        )
        self._repair(changes, now)
        self._save_headroom(now, force=True)
        return changes
