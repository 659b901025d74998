"""Each webhook endpoint's health, as the relay sees it: up, or failing since when and probed when next.

Pure: the relay passes the time. A failing endpoint is probed on a short capped backoff (1 s doubling to
15 s by default) so that the moment it answers again its backlog drains, instead of each alert waiting out
its own retry schedule (minutes to hours); that schedule takes over only after a long outage.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetguard.alerts.delivery import DeliveryResult

# Answers that say nothing about one alert but that the endpoint itself cannot take any now.
_ENDPOINT_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class ProbePolicy:
    initial_seconds: float
    max_seconds: float
    long_outage_seconds: float


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    down_since: float | None = None  # None: answering
    failures: int = 0  # consecutive endpoint-level failures
    next_probe_at: float = 0.0

    @property
    def up(self) -> bool:
        return self.down_since is None


def endpoint_failed(result: DeliveryResult) -> bool:
    """No answer, a 5xx, 408 or 429: the endpoint is down (or refusing everything), not this one alert.
    Any other answer, even a 4xx, shows the endpoint is there."""
    code = result.status_code
    return code is None or code >= 500 or code in _ENDPOINT_STATUSES


def after_failure(health: EndpointHealth, now: float, policy: ProbePolicy) -> EndpointHealth:
    failures = health.failures + 1
    delay = min(policy.initial_seconds * 2.0 ** min(failures - 1, 60), policy.max_seconds)
    since = now if health.down_since is None else health.down_since
    return EndpointHealth(down_since=since, failures=failures, next_probe_at=now + delay)


def long_outage(health: EndpointHealth, now: float, policy: ProbePolicy) -> bool:
    """Down for longer than the short probing lasts: each alert's own schedule applies from here."""
    return health.down_since is not None and now - health.down_since >= policy.long_outage_seconds


def probe_due(health: EndpointHealth, now: float, policy: ProbePolicy) -> bool:
    return not health.up and not long_outage(health, now, policy) and now >= health.next_probe_at
