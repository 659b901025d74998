"""The policy as data: defaults from the XID catalogue, overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis.model import RepairAction, Severity
from diagnosis.policy_load import PolicyError
from fleetguard.settings.policy_files import load_policy


def test_fatal_catalogue_xids_are_critical_and_application_xids_need_repeats() -> None:
    policy = load_policy()
    assert policy.xid[79].severity is Severity.CRITICAL
    assert policy.xid[79].action is RepairAction.REBOOT_NODE
    assert policy.xid[79].sticky_seconds == 10800
    assert policy.xid[31].application and policy.xid[31].min_count == 2
    assert policy.xid[31].action is RepairAction.INSPECT
    assert policy.xid[43].severity is Severity.INFO


def test_an_unlisted_xid_takes_the_default_rule() -> None:
    rule = load_policy().xid_rule(4242)
    assert (rule.severity, rule.action, rule.min_count) == (Severity.WARNING, RepairAction.WATCH, 1)


def test_overrides_merge_key_by_key() -> None:
    policy = load_policy(overrides={"xid": {"79": {"min_count": 3}}, "breaker": {"max_host_fraction": 0.2}})
    assert policy.xid[79].min_count == 3
    assert policy.xid[79].sticky_seconds == 10800  # untouched keys keep the shipped value
    assert policy.breaker.max_host_fraction == 0.2


def test_a_policy_file_overlays_the_shipped_one(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[counters.symbol_error]\nwarn_rate_per_second = 1\n[escalation]\nreturns = 5\n")
    policy = load_policy(path)
    assert policy.counters["symbol_error"].warn_rate_per_second == 1.0
    assert policy.counters["symbol_error"].critical_rate_per_second == 120.0
    assert policy.escalation.returns == 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"xid": {"31": {"min_count": 0}}}, "policy.xid.31.min_count: expected an integer >= 1"),
        ({"xid": {"31": {"severity": "loud"}}}, "policy.xid.31.severity: 'loud' is not one of"),
        ({"xid": {"abc": {}}}, "policy.xid.abc: an XID must be a number"),
        ({"counters": {"x": {}}}, "policy.counters.x: needs fatal_on_increase or a rate threshold"),
        (
            {"gpu": {"temperature_warn_celsius": "hot"}},
            "policy.gpu.temperature_warn_celsius: expected a finite",
        ),
        ({"breaker": {"max_host_fraction": 1.5}}, "policy.breaker.max_host_fraction: must be within"),
        ({"escalation": {"ladder": ["reset_gpu", "pray"]}}, "policy.escalation.ladder: 'pray' is not one of"),
        ({"lifecycle": {"resolve_after": 1}}, "policy.lifecycle.resolve_after: unknown key"),
        ({"cancellations": [{"fault": "a"}]}, "policy.cancellations[0]: needs both fault and by"),
        ({"retry": {"actions": ["drain", "pray"]}}, "policy.retry.actions: 'pray' is not one of"),
        ({"retry": {"attempts": 0}}, "policy.retry.attempts: must be within 1..20"),
        ({"retry": {"first_delay_seconds": 0.1}}, "policy.retry.first_delay_seconds: must be within"),
    ],
)
def test_bad_values_are_errors_naming_the_key(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_policy(overrides=overrides)


def test_a_missing_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy(tmp_path / "nope.toml")
