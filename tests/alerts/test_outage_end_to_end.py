"""The issue's scenario, shortened: `fleetguard up --simulate 2x8` with its webhook receiver (a real
process verifying Standard Webhooks signatures) answering 503 for ~8 s while incidents open. Every alert
raised during the outage arrives within 30 s of the receiver's return, once, signed, each incident's in order.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.alerts.outage_scenario import run_outage

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_after_an_outage_every_alert_arrives_promptly_once_signed_and_in_order(tmp_path: Path) -> None:
    run = run_outage(
        tmp_path,
        outage_seconds=8,
        after_seconds=32,
        alerts_toml="probe_max_seconds = 2",
        head_start_seconds=40,  # the thermal, ECC and XID faults open incidents within seconds
        stop_when_caught_up=True,
    )
    assert run.up_returncode == 0, run.up_output[-3000:]
    during = run.raised_during_outage()
    assert len(during) >= 2
    assert all(status == "delivered" for *_, status in during), during
    assert run.catch_up_seconds() <= 30.0
    accepted = [r for r in run.log if r["status"] == 200]
    assert all(r["valid"] for r in run.log) and not any(r["duplicate"] for r in accepted)
    assert len(accepted) == len({r["id"] for r in accepted})
    # Each incident's alerts reached the receiver in the order they happened (the outbox's order).
    sent: dict[str, list[str]] = defaultdict(list)
    for r in accepted:
        sent[r["incident_id"]].append(r["id"])
    written: dict[str, list[str]] = defaultdict(list)
    for alert_id, incident, _event, _created, delivered, _status in run.outbox:
        if delivered is not None:
            written[incident].append(alert_id)
    assert sent == written
