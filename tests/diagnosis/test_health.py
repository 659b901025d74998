"""The one health model (diagnosis/health.py): silence first, then the worst open incident, then what a
part's own sample shows, which can only make it worse."""

from __future__ import annotations

import pytest

from diagnosis.health import (
    HEALTHY,
    Health,
    Liveness,
    OpenIncident,
    Verdict,
    host_verdicts,
    judge,
    silent_after,
    worst_first,
)
from diagnosis.model import Severity

LIVE = Liveness(age_seconds=5.0, silent_after_seconds=40.0)
GONE = Liveness(age_seconds=300.0, silent_after_seconds=40.0)


def _incident(severity: Severity, summary: str, opened: float = 0.0, host: str = "h1") -> OpenIncident:
    return OpenIncident(f"i-{summary}", host, "gpu", "GPU-1", severity, summary, opened)


def test_nothing_open_and_heard_recently_is_healthy() -> None:
    assert judge(LIVE, []) == HEALTHY


@pytest.mark.parametrize("severity", list(Severity))
def test_a_part_with_an_open_incident_is_never_healthy(severity: Severity) -> None:
    verdict = judge(LIVE, [_incident(severity, "NVLink CRC rate")])
    assert verdict.health is (Health.FAILED if severity is Severity.CRITICAL else Health.DEGRADED)
    assert verdict.reason == "NVLink CRC rate"


def test_the_worst_open_incident_is_the_reason_and_the_rest_are_counted() -> None:
    incidents = [
        _incident(Severity.WARNING, "ECC rate", 1.0),
        _incident(Severity.CRITICAL, "XID 48 double-bit ECC", 5.0),
        _incident(Severity.CRITICAL, "XID 79 fell off the bus", 2.0),
    ]
    verdict = judge(LIVE, incidents)
    assert verdict == Verdict(Health.FAILED, "XID 79 fell off the bus (+2 more)")
    assert [i.summary for i in worst_first(incidents)] == [
        "XID 79 fell off the bus",
        "XID 48 double-bit ECC",
        "ECC rate",
    ]


def test_silent_is_silent_not_failed_with_a_stale_reason() -> None:
    verdict = judge(GONE, [_incident(Severity.CRITICAL, "port DOWN")], Verdict(Health.FAILED, "port DOWN"))
    assert verdict.health is Health.SILENT
    assert "port DOWN" not in verdict.reason
    assert verdict.reason == "no data for 300 s (1 open incident)"


def test_an_observation_makes_a_part_worse_never_better() -> None:
    throttled = Verdict(Health.DEGRADED, "throttled: hw thermal")
    assert judge(LIVE, [], throttled) == throttled
    critical = [_incident(Severity.CRITICAL, "XID 48")]
    assert judge(LIVE, critical, throttled).health is Health.FAILED
    assert judge(LIVE, critical, HEALTHY).health is Health.FAILED


def test_host_verdicts_cover_every_host_heard_and_every_host_with_an_incident() -> None:
    verdicts = host_verdicts(
        {"a": LIVE, "b": GONE},
        [_incident(Severity.WARNING, "flaps", host="a"), _incident(Severity.CRITICAL, "lost", host="c")],
    )
    assert verdicts == {
        "a": Verdict(Health.DEGRADED, "flaps"),
        "b": Verdict(Health.SILENT, "no data for 300 s"),
        "c": Verdict(Health.FAILED, "lost"),
    }


def test_silence_limit_is_configured_or_three_intervals_and_a_margin() -> None:
    assert silent_after(5.0) == 25.0
    assert silent_after(5.0, 90.0) == 90.0
    assert Liveness(25.0, 25.0).silent is False
    assert Liveness(25.1, 25.0).silent is True
