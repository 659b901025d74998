"""The outbox relay: sends due alerts, one endpoint at its own rate, retrying on the schedule with jitter,
honouring Retry-After, dead-lettering when the schedule runs out, and recording every attempt.

One thread, its own store connection. An alert is sent only when no older alert about the same incident
is still pending for that endpoint, so a receiver never sees "resolved" before "opened".
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb

from fleetguard.alerts.delivery import DeliveryOutcome, DeliveryResult, post
from fleetguard.alerts.outbox import AlertStatus, DueAlert, due, open_alertmanager_alerts, record_attempt
from fleetguard.alerts.signing import SecretError, read_secret_text, signed_headers, signing_key
from fleetguard.clock import Clock
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, WebhookKind
from fleetguard.store.incident_tables import ts_sql

log = logging.getLogger(__name__)

Poster = Callable[[str, bytes, dict[str, str], float], DeliveryResult]


@dataclass
class RelayStats:
    sent: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)  # attempts that will be retried
    dead: dict[str, int] = field(default_factory=dict)
    gone: dict[str, int] = field(default_factory=dict)

    def add(self, counter: dict[str, int], endpoint: str) -> None:
        counter[endpoint] = counter.get(endpoint, 0) + 1


class AlertRelay:
    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        config: AlertsConfig,
        clock: Clock,
        poster: Poster = post,
        rng: random.Random | None = None,
        signing_time: Callable[[], float] = time.time,
    ) -> None:
        self.con = con
        self.config = config
        self.clock = clock
        self.poster = poster
        self.rng = rng or random.Random()
        # Receivers reject a webhook-timestamp far from their own clock: always the real time, even when the
        # schedule runs on another clock (tests, replays).
        self.signing_time = signing_time
        self.endpoints = {hook.name: hook for hook in config.webhooks}
        self.stats = RelayStats()
        self._next_send: dict[str, float] = {}  # endpoint -> monotonic time it may send again
        self._next_resend = 0.0
        self._held_until: float | None = None  # monotonic time an endpoint's rate next lets a due alert go
        self._wake = threading.Event()

    def wake(self) -> None:
        """New outbox rows: look now rather than at the next poll."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            wait = self.config.poll_seconds
            try:
                self.run_once()
                # Alerts held back only by an endpoint's rate go as soon as it allows, not a poll later.
                if self._held_until is not None:
                    wait = min(wait, max(0.0, self._held_until - self.clock.monotonic()))
            except Exception as exc:  # the relay must outlive a bad row or a store hiccup: retried next poll
                log.warning("alert relay: %s: %s (retrying)", type(exc).__name__, exc)
            self._wake.wait(wait)
            self._wake.clear()

    def run_once(self) -> int:
        """Send what is due (within the endpoints' rates); return the number of attempts made."""
        attempts = 0
        self._held_until = None
        blocked: set[tuple[str, str]] = set()
        for alert in self._due():
            hook = self.endpoints.get(alert.endpoint)
            pair = (alert.endpoint, alert.incident_id)
            if hook is None or pair in blocked:
                blocked.add(pair)
                continue
            if not self._may_send(hook):
                blocked.add(pair)
                allowed_at = self._next_send[hook.name]
                self._held_until = (
                    allowed_at if self._held_until is None else min(self._held_until, allowed_at)
                )
                continue
            self._attempt(hook, alert)
            attempts += 1
        self._resend_alertmanager()
        return attempts

    def _due(self) -> list[DueAlert]:
        # Oldest pending row per (endpoint, incident) only: later ones wait for it.
        rows = due(self.con, self.clock.time())
        firsts = self.con.execute(
            "SELECT endpoint, incident_id, arg_min(alert_id, created_at) FROM alert_outbox "
            "WHERE status = 'pending' GROUP BY ALL"
        ).fetchall()
        first = {(str(e), str(i)): str(a) for e, i, a in firsts}
        return [r for r in rows if first.get((r.endpoint, r.incident_id)) == r.alert_id]

    def _may_send(self, hook: WebhookConfig) -> bool:
        now = self.clock.monotonic()
        if now < self._next_send.get(hook.name, 0.0):
            return False
        self._next_send[hook.name] = now + 1.0 / hook.rate_per_second
        return True

    def _attempt(self, hook: WebhookConfig, alert: DueAlert) -> None:
        now = self.clock.time()
        try:
            body, headers = self._request(hook, alert, int(self.signing_time()))
        except SecretError as exc:
            result = DeliveryResult(DeliveryOutcome.RETRY, None, str(exc), None, 0.0)
        else:
            result = self.poster(hook.url, body, headers, hook.timeout_seconds)
        status, next_at = self._after(result, alert, now)
        record_attempt(
            self.con,
            alert,
            now=now,
            status_code=result.status_code,
            outcome=result.outcome.value,
            error=result.error,
            duration_seconds=result.duration_seconds,
            new_status=status,
            next_attempt_at=next_at,
        )
        if status is AlertStatus.GONE:
            self._disable(hook.name, now)
        counter = {
            AlertStatus.DELIVERED: self.stats.sent,
            AlertStatus.PENDING: self.stats.failed,
            AlertStatus.DEAD: self.stats.dead,
            AlertStatus.GONE: self.stats.gone,
        }[status]
        self.stats.add(counter, hook.name)
        if result.retry_after_seconds:
            self._next_send[hook.name] = self.clock.monotonic() + result.retry_after_seconds

    def _after(self, result: DeliveryResult, alert: DueAlert, now: float) -> tuple[AlertStatus, float]:
        if result.outcome is DeliveryOutcome.DELIVERED:
            return AlertStatus.DELIVERED, now
        if result.outcome is DeliveryOutcome.GONE:
            return AlertStatus.GONE, now
        schedule = self.config.retry_schedule_seconds
        attempt = alert.attempts + 1
        if attempt >= len(schedule):
            log.warning("alert %s to %s dead-lettered: %s", alert.alert_id, alert.endpoint, result.error)
            return AlertStatus.DEAD, now
        jitter = self.config.jitter_fraction
        delay = schedule[attempt] * (1.0 + self.rng.uniform(-jitter, jitter))
        if result.retry_after_seconds is not None:
            delay = max(delay, result.retry_after_seconds)
        return AlertStatus.PENDING, now + delay

    def _request(self, hook: WebhookConfig, alert: DueAlert, timestamp: int) -> tuple[bytes, dict[str, str]]:
        body = alert.body_json.encode()
        if hook.kind is WebhookKind.GENERIC:
            key = signing_key(read_secret_text(hook.secret_file))
            return body, signed_headers(key, alert.alert_id, timestamp, body)
        if hook.kind is WebhookKind.PAGERDUTY:
            document = json.loads(alert.body_json)
            document["routing_key"] = read_secret_text(hook.secret_file)
            return json.dumps(document, separators=(",", ":")).encode(), {}
        return body, {}

    def _disable(self, endpoint: str, now: float) -> None:
        """410: every pending alert to this endpoint is set aside until `fleetguard alerts replay`."""
        self.con.execute(
            f"UPDATE alert_outbox SET status = 'gone', last_error = '410 Gone: endpoint disabled', "
            f"next_attempt_at = {ts_sql()} WHERE endpoint = ? AND status = 'pending'",
            [now, endpoint],
        )
        log.warning(
            "alert endpoint %s answered 410 Gone: disabled until `fleetguard alerts replay`", endpoint
        )

    def _resend_alertmanager(self) -> None:
        """Alertmanager resolves an alert it stops hearing about: re-send every open one periodically."""
        now = self.clock.monotonic()
        if now < self._next_resend:
            return
        self._next_resend = now + self.config.resend_seconds
        for hook in self.endpoints.values():
            if hook.kind is not WebhookKind.ALERTMANAGER:
                continue
            alerts = [a for body in open_alertmanager_alerts(self.con, hook.name) for a in json.loads(body)]
            if not alerts:
                continue
            result = self.poster(hook.url, json.dumps(alerts).encode(), {}, hook.timeout_seconds)
            if result.outcome is not DeliveryOutcome.DELIVERED:
                log.info("re-sending %d open alerts to %s failed: %s", len(alerts), hook.name, result.error)
