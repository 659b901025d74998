"""The [alerts] config section and its [[alerts.webhooks]] endpoints, checked with errors naming the key."""

from __future__ import annotations

import contextlib
import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from diagnosis.model import Severity

# Standard Webhooks' schedule: at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h.
DEFAULT_RETRY_SCHEDULE = (0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 50400.0, 72000.0, 86400.0)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_WEBHOOK_KEYS = frozenset(
    {
        "name",
        "url",
        "kind",
        "secret_file",
        "min_severity",
        "rate_per_second",
        "timeout_seconds",
        "probe_max_seconds",
    }
)
_ALERT_KEYS = frozenset(
    {
        "enabled",
        "webhooks",
        "retry_schedule_seconds",
        "jitter_fraction",
        "resend_seconds",
        "poll_seconds",
        "probe_initial_seconds",
        "probe_max_seconds",
        "long_outage_seconds",
    }
)


class WebhookKind(StrEnum):
    GENERIC = "generic"  # Standard Webhooks, signed
    SLACK = "slack"
    PAGERDUTY = "pagerduty"
    ALERTMANAGER = "alertmanager"


@dataclass(frozen=True)
class WebhookConfig:
    name: str
    url: str
    kind: WebhookKind = WebhookKind.GENERIC
    secret_file: str = ""  # generic: the whsec_ secret; pagerduty: the routing key
    min_severity: Severity = Severity.WARNING
    rate_per_second: float = 1.0  # Slack takes about one message a second per webhook
    timeout_seconds: float = 15.0
    probe_max_seconds: float | None = None  # None: [alerts] probe_max_seconds
    config_key: str = ""  # "alerts.webhooks[0]": where refusals about this hook point the operator

    @property
    def secret_key(self) -> str:
        return f"{self.config_key or f'alerts.webhooks[name={self.name}]'}.secret_file"


@dataclass(frozen=True)
class AlertsConfig:
    enabled: bool = True
    webhooks: tuple[WebhookConfig, ...] = ()
    retry_schedule_seconds: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    jitter_fraction: float = 0.2
    resend_seconds: float = 60.0  # Alertmanager: active alerts are re-sent this often
    poll_seconds: float = 1.0  # the relay looks at the outbox at least this often
    # A failing endpoint is probed (with its oldest pending alert) 1 s, 2 s, 4 s ... up to 15 s apart; the
    # moment it answers, its whole backlog is due. Only an outage longer than long_outage_seconds falls back
    # to each alert's own retry schedule (hours apart), and from there to dead letters.
    probe_initial_seconds: float = 1.0
    probe_max_seconds: float = 15.0
    long_outage_seconds: float = 900.0

    def probe_cap(self, hook: WebhookConfig) -> float:
        return self.probe_max_seconds if hook.probe_max_seconds is None else hook.probe_max_seconds


def parse_alerts(values: Mapping[str, Any]) -> AlertsConfig:
    """The [alerts] table; ValueError("alerts.<key>: why") for anything unusable."""
    unknown = sorted(set(values) - _ALERT_KEYS)
    if unknown:
        raise ValueError(f"alerts.{unknown[0]}: unknown key (known: {', '.join(sorted(_ALERT_KEYS))})")
    base = AlertsConfig()
    raw_hooks = values.get("webhooks", [])
    if not isinstance(raw_hooks, list):
        raise ValueError("alerts.webhooks: expected [[alerts.webhooks]] tables")
    hooks = tuple(_webhook(item, f"alerts.webhooks[{i}]") for i, item in enumerate(raw_hooks))
    names = [h.name for h in hooks]
    if len(set(names)) != len(names):
        raise ValueError("alerts.webhooks: two webhooks have the same name (names must be unique)")
    schedule = values.get("retry_schedule_seconds", list(base.retry_schedule_seconds))
    if (
        not isinstance(schedule, list)
        or not schedule
        or len(schedule) > 50
        or not all(_number_ok(v, 0.0, 7 * 86400.0) for v in schedule)
    ):
        raise ValueError("alerts.retry_schedule_seconds: expected 1-50 numbers of seconds (0 to 7 days)")
    return AlertsConfig(
        enabled=_bool(values.get("enabled", True), "alerts.enabled"),
        webhooks=hooks,
        retry_schedule_seconds=tuple(float(v) for v in schedule),
        jitter_fraction=_number(values, "jitter_fraction", "alerts", base.jitter_fraction, 0.0, 1.0),
        resend_seconds=_number(values, "resend_seconds", "alerts", base.resend_seconds, 1.0, 86400.0),
        poll_seconds=_number(values, "poll_seconds", "alerts", base.poll_seconds, 0.01, 3600.0),
        probe_initial_seconds=_number(
            values, "probe_initial_seconds", "alerts", base.probe_initial_seconds, 0.01, 3600.0
        ),
        probe_max_seconds=_number(
            values, "probe_max_seconds", "alerts", base.probe_max_seconds, 0.01, 3600.0
        ),
        long_outage_seconds=_number(
            values, "long_outage_seconds", "alerts", base.long_outage_seconds, 0.0, 7 * 86400.0
        ),
    )


def _webhook(item: Any, where: str) -> WebhookConfig:
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: expected a table")
    unknown = sorted(set(item) - _WEBHOOK_KEYS)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(_WEBHOOK_KEYS))})")
    url = item.get("url")
    if not isinstance(url, str) or not url:
        raise ValueError(f"{where}.url: required")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"{where}.url: must be an http:// or https:// URL with a host")
    try:
        kind = WebhookKind(item.get("kind", "generic"))
    except ValueError:
        raise ValueError(f"{where}.kind: one of {', '.join(k.value for k in WebhookKind)}") from None
    try:
        severity = Severity(item.get("min_severity", "warning"))
    except ValueError:
        raise ValueError(f"{where}.min_severity: one of {', '.join(s.value for s in Severity)}") from None
    name = item.get("name", f"{kind.value}-{parsed.hostname}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{where}.name: 1-64 letters, digits, '_', '.' or '-'")
    secret_file = item.get("secret_file", "")
    if not isinstance(secret_file, str):
        raise ValueError(f"{where}.secret_file: expected a path")
    if kind in (WebhookKind.GENERIC, WebhookKind.PAGERDUTY) and not secret_file:
        what = "the whsec_ signing secret" if kind is WebhookKind.GENERIC else "the routing key"
        raise ValueError(f"{where}.secret_file: required for kind {kind.value} ({what})")
    return WebhookConfig(
        name=name,
        url=url,
        kind=kind,
        secret_file=secret_file,
        min_severity=severity,
        rate_per_second=_number(item, "rate_per_second", where, 1.0, 0.001, 1000.0),
        timeout_seconds=_number(item, "timeout_seconds", where, 15.0, 0.1, 120.0),
        probe_max_seconds=(
            None
            if "probe_max_seconds" not in item
            else _number(item, "probe_max_seconds", where, 15.0, 0.01, 3600.0)
        ),
        config_key=where,
    )


def _number_ok(value: Any, low: float, high: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _number(table: Mapping[str, Any], key: str, where: str, default: float, low: float, high: float) -> float:
    value = table.get(key, default)
    if isinstance(value, str):  # from the environment
        with contextlib.suppress(ValueError):
            value = float(value)
    if not _number_ok(value, low, high):
        raise ValueError(f"{where}.{key}: expected a number within {low:g}..{high:g}, got {value!r}")
    return float(value)


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, str) and value.strip().lower() in {
        "1",
        "true",
        "yes",
        "on",
        "0",
        "false",
        "no",
        "off",
    }:
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return value
