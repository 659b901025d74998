"""Endpoint health: which answers mean the endpoint is down, and the probe backoff."""

from __future__ import annotations

from fleetguard.alerts.delivery import DeliveryOutcome, DeliveryResult
from fleetguard.alerts.endpoint_health import (
    EndpointHealth,
    ProbePolicy,
    after_failure,
    endpoint_failed,
    long_outage,
    probe_due,
)

POLICY = ProbePolicy(initial_seconds=1.0, max_seconds=15.0, long_outage_seconds=900.0)


def result(status: int | None) -> DeliveryResult:
    outcome = DeliveryOutcome.DELIVERED if status == 200 else DeliveryOutcome.RETRY
    return DeliveryResult(outcome, status, "", None, 0.0)


def test_no_answer_5xx_408_and_429_mean_the_endpoint_is_down_other_answers_do_not() -> None:
    assert [endpoint_failed(result(s)) for s in (None, 500, 503, 408, 429)] == [True] * 5
    assert [endpoint_failed(result(s)) for s in (200, 400, 404, 422)] == [False] * 4


def test_probes_double_from_one_second_up_to_the_cap() -> None:
    health, now, gaps = EndpointHealth(), 100.0, []
    for _ in range(7):
        health = after_failure(health, now, POLICY)
        gaps.append(health.next_probe_at - now)
        now = health.next_probe_at
    assert gaps == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert health.down_since == 100.0 and not health.up


def test_after_a_long_outage_there_are_no_more_short_probes() -> None:
    health = after_failure(EndpointHealth(), 0.0, POLICY)
    assert probe_due(health, 1.0, POLICY) and not long_outage(health, 1.0, POLICY)
    assert long_outage(health, 900.0, POLICY) and not probe_due(health, 900.0, POLICY)
