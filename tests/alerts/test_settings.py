"""[alerts] probe settings: defaults, per-webhook override, and clear errors naming the key."""

from __future__ import annotations

import pytest

from fleetguard.settings.alerts import parse_alerts

HOOK = {"name": "chat", "url": "https://hooks.example.com/x", "kind": "slack"}


def test_probe_settings_default_to_one_second_doubling_to_fifteen() -> None:
    config = parse_alerts({"webhooks": [HOOK]})
    assert (config.probe_initial_seconds, config.probe_max_seconds, config.long_outage_seconds) == (
        1.0,
        15.0,
        900.0,
    )
    assert config.probe_cap(config.webhooks[0]) == 15.0


def test_a_webhook_may_have_its_own_probe_cap() -> None:
    config = parse_alerts({"probe_max_seconds": 30, "webhooks": [{**HOOK, "probe_max_seconds": 2}]})
    assert config.probe_cap(config.webhooks[0]) == 2.0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"probe_max_seconds": 0}, "alerts.probe_max_seconds"),
        ({"probe_initial_seconds": "soon"}, "alerts.probe_initial_seconds"),
        ({"long_outage_seconds": -1}, "alerts.long_outage_seconds"),
        ({"webhooks": [{**HOOK, "probe_max_seconds": 1e9}]}, "alerts.webhooks[0].probe_max_seconds"),
    ],
)
def test_bad_probe_settings_are_refused_naming_the_key(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_alerts(values)
