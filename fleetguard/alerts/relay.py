"""The outbox relay: sends due alerts, one endpoint at its own rate, honouring Retry-After, muting what a
silence matches, and recording every attempt.

Recovery is per endpoint (fleetguard.alerts.endpoint_health): a failing endpoint is probed on a short capped
backoff with its oldest pending alert, and the moment it answers its whole backlog is due, oldest first.
Each alert's own retry schedule (with jitter) matters only for an alert an answering endpoint refused, or
after a long outage; it dead-letters when it runs out.

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

from fleetguard.alerts.alertmanager_silences import api_base, silence_body, sync
from fleetguard.alerts.delivery import DeliveryOutcome, DeliveryResult, post
from fleetguard.alerts.endpoint_health import (
    EndpointHealth,
    ProbePolicy,
    after_failure,
    endpoint_failed,
    long_outage,
    probe_due,
)
from fleetguard.alerts.outbox import (
    AlertStatus,
    DueAlert,
    heads,
    make_due,
    mark_silenced,
    open_alertmanager_alerts,
    opening_silenced,
    pending_endpoints,
    record_attempt,
    set_aside_after,
)
from fleetguard.alerts.signing import SecretError, read_secret_text, signed_headers, signing_key
from fleetguard.alerts.silence_rules import Silence, silencing
from fleetguard.alerts.silences import active_silences
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
    silenced: dict[str, int] = field(default_factory=dict)

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
        self._delivered = False
        self._synced_ids: frozenset[str] | None = None
        self._next_silence_sync = 0.0
        self._health: dict[str, EndpointHealth] = {}
        self.probe = {
            hook.name: ProbePolicy(
                config.probe_initial_seconds, config.probe_cap(hook), config.long_outage_seconds
            )
            for hook in config.webhooks
        }
        # After a restart, whatever is pending may wait far along its own schedule: probe at once instead.
        now = clock.time()
        for endpoint in pending_endpoints(con):
            if endpoint in self.endpoints:
                self._health[endpoint] = EndpointHealth(down_since=now, failures=0, next_probe_at=now)
        self._warn_unusable_secrets()

    def _warn_unusable_secrets(self) -> None:
        """Say at start-up, once per webhook, when its secret file is refused; its alerts wait (retrying)
        until the file is fixed, so an operator reads the fix now rather than after the first page is lost."""
        for hook in self.config.webhooks:
            if hook.secret_file:
                try:
                    read_secret_text(hook.secret_file, hook.secret_key)
                except SecretError as exc:
                    log.error("webhook %s will not be sent: %s", hook.name, exc)

    def wake(self) -> None:
        """New outbox rows: look now rather than at the next poll."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            wait = self.config.poll_seconds
            try:
                attempts = self.run_once()
                # Alerts held back only by an endpoint's rate go as soon as it allows, not a poll later;
                # after a delivery the incident's next alert (or a recovered backlog) goes at once too.
                if self._held_until is not None:
                    wait = min(wait, max(0.0, self._held_until - self.clock.monotonic()))
                if attempts and self._delivered:
                    wait = 0.0
            except Exception as exc:  # the relay must outlive a bad row or a store hiccup: retried next poll
                log.warning("alert relay: %s: %s (retrying)", type(exc).__name__, exc)
            self._wake.wait(wait)
            self._wake.clear()

    def health(self, endpoint: str) -> EndpointHealth:
        return self._health.get(endpoint, EndpointHealth())

    def run_once(self) -> int:
        """Send what is due (within the endpoints' health and rates); return the number of attempts made."""
        attempts = 0
        self._held_until = None
        self._delivered = False
        now = self.clock.time()
        silences = active_silences(self.con, now)
        stopped: set[str] = set()  # endpoints that failed this round: nothing more goes to them now
        recovered: set[str] = set()  # endpoints that answered again this round: their backlog is due
        for alert in heads(self.con):
            hook = self.endpoints.get(alert.endpoint)
            if hook is None or hook.name in stopped:
                continue
            if not self._eligible(hook, alert, now, recovered):
                continue
            silence = silencing(silences, alert.labels(), now)
            if silence is not None and not self._mirrored(hook, silence):
                self._silence(alert, silence.silence_id, now)
                continue
            if alert.event == "resolved" and opening_silenced(self.con, alert):
                # The receiver never heard of it: a lone "resolved" would only puzzle it.
                self._silence(alert, "its opening's silence", now)
                continue
            if not self._may_send(hook):
                allowed_at = self._next_send[hook.name]
                self._held_until = (
                    allowed_at if self._held_until is None else min(self._held_until, allowed_at)
                )
                continue
            was_up = self.health(hook.name).up
            result = self._attempt(hook, alert, now)
            attempts += 1
            if endpoint_failed(result):
                health = after_failure(self.health(hook.name), now, self.probe[hook.name])
                self._health[hook.name] = health
                if not long_outage(health, now, self.probe[hook.name]):
                    stopped.add(hook.name)
                if was_up:
                    log.warning("alert endpoint %s is failing (%s): probing it", hook.name, result.error)
                continue
            self._delivered = self._delivered or result.outcome is DeliveryOutcome.DELIVERED
            if not was_up:
                log.warning("alert endpoint %s answers again: sending its backlog", hook.name)
                make_due(self.con, hook.name, now)
                recovered.add(hook.name)
            self._health[hook.name] = EndpointHealth()
        self._sync_silences(silences)
        self._resend_alertmanager()
        return attempts

    def _mirrored(self, hook: WebhookConfig, silence: Silence) -> bool:
        """Alertmanager mutes this one itself (the relay mirrors it there): the alert is sent, and shows as
        suppressed, rather than going quiet there and being resolved for want of re-sends."""
        return (
            hook.kind is WebhookKind.ALERTMANAGER
            and api_base(hook.url) is not None
            and silence_body(silence) is not None
        )

    def _sync_silences(self, silences: list[Silence]) -> None:
        """Mirror silences into Alertmanager endpoints when they change, and at the re-send interval."""
        ids = frozenset(s.silence_id for s in silences)
        now = self.clock.monotonic()
        if ids == self._synced_ids and now < self._next_silence_sync:
            return
        self._synced_ids = ids
        self._next_silence_sync = now + self.config.resend_seconds
        for hook in self.endpoints.values():
            base = api_base(hook.url) if hook.kind is WebhookKind.ALERTMANAGER else None
            if base is None:
                continue
            try:
                sync(base, silences, hook.timeout_seconds)
            except (OSError, ValueError) as exc:
                self._synced_ids = None  # try again next round
                log.info("mirroring silences to %s failed: %s", hook.name, exc)

    def _eligible(self, hook: WebhookConfig, alert: DueAlert, now: float, recovered: set[str]) -> bool:
        """Up: its schedule has come round. Failing: one probe when the backoff allows (the oldest pending
        alert), or, after a long outage, whatever its own schedule says."""
        if hook.name in recovered:
            return True
        health = self.health(hook.name)
        policy = self.probe[hook.name]
        if health.up or long_outage(health, now, policy):
            return alert.next_attempt_at <= now
        # One probe per round: after it the endpoint is either stopped for the round or recovered.
        return probe_due(health, now, policy)

    def _silence(self, alert: DueAlert, silence_id: str, now: float) -> None:
        mark_silenced(self.con, alert, silence_id, now)
        self.stats.add(self.stats.silenced, alert.endpoint)
        log.info("alert %s to %s silenced by %s", alert.alert_id, alert.endpoint, silence_id)

    def _may_send(self, hook: WebhookConfig) -> bool:
        now = self.clock.monotonic()
        if now < self._next_send.get(hook.name, 0.0):
            return False
        self._next_send[hook.name] = now + 1.0 / hook.rate_per_second
        return True

    def _attempt(self, hook: WebhookConfig, alert: DueAlert, now: float) -> DeliveryResult:
        try:
            body, headers = self._request(hook, alert, int(self.signing_time()))
        except SecretError as exc:
            result = DeliveryResult(DeliveryOutcome.RETRY, None, str(exc), None, 0.0)
        else:
            result = self.poster(hook.url, body, headers, hook.timeout_seconds)
        status, next_at, step = self._after(result, alert, now)
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
            schedule_step=step,
        )
        if status is AlertStatus.GONE:
            self._disable(hook.name, now)
        if status is AlertStatus.DEAD:
            set_aside_after(self.con, alert, AlertStatus.DEAD, f"an earlier alert ({alert.alert_id}) is dead")
        counter = {
            AlertStatus.DELIVERED: self.stats.sent,
            AlertStatus.PENDING: self.stats.failed,
            AlertStatus.DEAD: self.stats.dead,
            AlertStatus.GONE: self.stats.gone,
        }[status]
        self.stats.add(counter, hook.name)
        if result.retry_after_seconds:
            self._next_send[hook.name] = self.clock.monotonic() + result.retry_after_seconds
        return result

    def _after(self, result: DeliveryResult, alert: DueAlert, now: float) -> tuple[AlertStatus, float, int]:
        """The alert's new status, next attempt and schedule step. A probe sent ahead of the alert's own
        schedule does not use a step of it: only an outage that outlasts the schedule dead-letters."""
        step = alert.schedule_step
        if result.outcome is DeliveryOutcome.DELIVERED:
            return AlertStatus.DELIVERED, now, step
        if result.outcome is DeliveryOutcome.GONE:
            return AlertStatus.GONE, now, step
        after = result.retry_after_seconds or 0.0
        if alert.next_attempt_at > now:  # a probe ahead of schedule
            return AlertStatus.PENDING, max(alert.next_attempt_at, now + after), step
        schedule = self.config.retry_schedule_seconds
        step += 1
        if step >= len(schedule):
            log.warning("alert %s to %s dead-lettered: %s", alert.alert_id, alert.endpoint, result.error)
            return AlertStatus.DEAD, now, step
        jitter = self.config.jitter_fraction
        delay = schedule[step] * (1.0 + self.rng.uniform(-jitter, jitter))
        return AlertStatus.PENDING, now + max(delay, after), step

    def _request(self, hook: WebhookConfig, alert: DueAlert, timestamp: int) -> tuple[bytes, dict[str, str]]:
        body = alert.body_json.encode()
        if hook.kind is WebhookKind.GENERIC:
            key = signing_key(read_secret_text(hook.secret_file, hook.secret_key))
            return body, signed_headers(key, alert.alert_id, timestamp, body)
        if hook.kind is WebhookKind.PAGERDUTY:
            document = json.loads(alert.body_json)
            document["routing_key"] = read_secret_text(hook.secret_file, hook.secret_key)
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
