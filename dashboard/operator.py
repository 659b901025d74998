"""Operator actions on an incident: acknowledge, silence, resolve. Each needs the operator token; each one
accepted is recorded in `operator_actions` (who did what is the audit trail); a refused one is only logged."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import duckdb

from dashboard.auth import token_accepted
from dashboard.queries.base import TS, StoreReader
from dashboard.queries.incidents import incident
from fleetguard.alerts.silences import add_silence

log = logging.getLogger(__name__)

MAX_NOTE_CHARS: Final = 500
MAX_SILENCE_MINUTES: Final = 7 * 24 * 60
DASHBOARD_OPERATOR: Final = "dashboard (operator token)"  # the token is shared: no name behind it

# Resolves an incident in the incident engine that owns it (IncidentService.resolve); True when it changed.
Resolver = Callable[[str, float], bool]


class OperatorAction(StrEnum):
    ACKNOWLEDGE = "acknowledge"
    SILENCE = "silence"
    RESOLVE = "resolve"


@dataclass(frozen=True)
class ActionResult:
    accepted: bool
    message: str


@dataclass(frozen=True)
class OperatorDesk:
    writer: StoreReader  # a cursor of the process's writing store: one writer, as everywhere
    token: str | None
    resolver: Resolver | None
    now: Callable[[], float]

    def perform(
        self,
        incident_id: str,
        action: OperatorAction,
        given_token: object,
        note: str = "",
        silence_minutes: float = 0,
    ) -> ActionResult:
        if not token_accepted(self.token, given_token):
            log.warning(
                "dashboard: %s of incident %.64r refused: no valid operator token", action.value, incident_id
            )
            why = (
                "no operator token is configured ([dashboard] operator_token_file)"
                if self.token is None
                else "wrong operator token"
            )
            return ActionResult(False, f"refused: {why}")
        note = " ".join(note.split())[:MAX_NOTE_CHARS]
        now = self.now()
        until: float | None = None
        if action is OperatorAction.SILENCE:
            if not (math.isfinite(silence_minutes) and 1 <= silence_minutes <= MAX_SILENCE_MINUTES):
                return ActionResult(False, f"refused: silence for 1 to {MAX_SILENCE_MINUTES} minutes")
            until = now + 60.0 * silence_minutes
        cur = self.writer.cursor()
        try:
            if incident(cur, incident_id) is None:
                return ActionResult(False, f"refused: no incident {incident_id[:64]!r}")
            outcome = "recorded"
            if action is OperatorAction.RESOLVE:
                if self.resolver is None:
                    return ActionResult(
                        False, "refused: no incident engine runs in this process to resolve it"
                    )
                outcome = "resolved" if self.resolver(incident_id, now) else "already resolved"
            if until is not None:
                # The relay reads alert_silences: the incident's alerts are muted there until `until`.
                add_silence(cur, (("incident_id", incident_id),), DASHBOARD_OPERATOR, note, now, until - now)
            cur.execute(
                f"INSERT INTO operator_actions VALUES ({TS}, ?, ?, ?, {'NULL' if until is None else TS}, ?)",
                [now, incident_id, action.value, note, *([] if until is None else [until]), outcome],
            )
        except ValueError as exc:  # too many active silences
            return ActionResult(False, f"refused: {exc}")
        except duckdb.Error as exc:
            log.warning("dashboard: %s of incident %s not stored: %s", action.value, incident_id, exc)
            return ActionResult(False, f"not stored: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        finally:
            cur.close()
        log.info("dashboard: operator %s incident %s (%s)", action.value, incident_id, outcome)
        return ActionResult(True, f"{action.value}: {outcome}")

    def replay_dead_letters(self, given_token: object, endpoint: str | None) -> ActionResult:
        """Dead-lettered alerts (and endpoints marked gone) back to the outbox, sent again from the start."""
        if not token_accepted(self.token, given_token):
            log.warning("dashboard: alert replay refused: no valid operator token")
            return ActionResult(False, "refused: wrong or no operator token")
        from fleetguard.alerts.outbox import requeue_dead

        cur = self.writer.cursor()
        try:
            count = requeue_dead(cur, self.now(), endpoint or None)
        except duckdb.Error as exc:
            return ActionResult(False, f"not stored: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        finally:
            cur.close()
        log.info("dashboard: operator replayed %d dead letters (endpoint %s)", count, endpoint or "any")
        return ActionResult(True, f"{count} alert(s) queued again")
