"""What the controller says about a self-check it asked for and has no answer to yet."""

from __future__ import annotations

from fleetguard.controller.fleet_repairs import waiting_detail


def test_an_undelivered_running_and_stale_selfcheck_each_say_so() -> None:
    assert waiting_detail("0123456789abcdef", 12, 0) == (
        "self-check 0123456789ab asked 12 s ago, not delivered yet: the host has not shipped since "
        "(is its agent running?)"
    )
    assert waiting_detail("c", 90, 3).endswith("delivered 3 times, running")
    assert "no answer: is the host's agent older than the controller?" in waiting_detail("c", 1200, 40)
