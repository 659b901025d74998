"""Builds a typed Policy from parsed TOML tables (the shipped policy, then the user's overrides).

Pure: the shell reads the files. Every error is a PolicyError naming the key (`policy.xid.31.min_count`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from enum import StrEnum
from typing import Any, TypeVar

from collectors.xid_catalog import XidEntry
from diagnosis.model import RepairAction, Severity
from diagnosis.policy import (
    BreakerPolicy,
    Cancellation,
    CounterRule,
    Escalation,
    EventRule,
    FindingRule,
    GpuRules,
    Lifecycle,
    Policy,
    RetryPolicy,
    SelfcheckPolicy,
    XidRule,
)
from fleetguard.records.rows import DataclassRecord

E = TypeVar("E", bound=StrEnum)

_TOP_KEYS = frozenset(
    {
        "burst_seconds",
        "lifecycle",
        "xid",
        "events",
        "counters",
        "gpu",
        "findings",
        "cancellations",
        "escalation",
        "breaker",
        "retry",
        "selfcheck",
    }
)
_XID_KEYS = frozenset(
    {
        "name",
        "severity",
        "action",
        "min_count",
        "count_window_seconds",
        "sticky_seconds",
        "application",
        "storm_lines",
    }
)


class PolicyError(Exception):
    """The policy cannot be used; the message names the key and the reason."""


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge of TOML tables: a table merges key by key, anything else (arrays too) replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def build_policy(catalog: Iterable[XidEntry], document: Mapping[str, Any], where: str = "policy") -> Policy:
    _known(document, _TOP_KEYS, where)
    xid_doc = _table(document, "xid", where)
    default = _xid_rule(
        XidRule(-1, "unlisted XID", Severity.WARNING, RepairAction.WATCH),
        _table(xid_doc, "default", f"{where}.xid"),
        f"{where}.xid.default",
    )
    xids = {entry.xid: _catalog_rule(entry) for entry in catalog}
    for name, table in xid_doc.items():
        if name == "default":
            continue
        key = f"{where}.xid.{name}"
        if not name.isdigit() or len(name) > 9:
            raise PolicyError(f"{key}: an XID must be a number")
        if not isinstance(table, Mapping):
            raise PolicyError(f"{key}: expected a table")
        xid = int(name)
        base = xids.get(xid) or replace(default, xid=xid, name=f"XID {xid}")
        xids[xid] = _xid_rule(base, table, key)
    return Policy(
        xid=xids,
        xid_default=default,
        events=_named(document, "events", where, _event_rule),
        counters=_named(document, "counters", where, _counter_rule),
        gpu=_dataclass(GpuRules(), _table(document, "gpu", where), f"{where}.gpu"),
        findings=_named(document, "findings", where, _finding_rule),
        cancellations=_cancellations(document.get("cancellations", []), f"{where}.cancellations"),
        escalation=_escalation(_table(document, "escalation", where), f"{where}.escalation"),
        lifecycle=_dataclass(Lifecycle(), _table(document, "lifecycle", where), f"{where}.lifecycle"),
        breaker=_breaker(_table(document, "breaker", where), f"{where}.breaker"),
        retry=_retry(_table(document, "retry", where), f"{where}.retry"),
        burst_seconds=_number(document, "burst_seconds", where, 180.0),
        selfcheck=_selfcheck(_table(document, "selfcheck", where), f"{where}.selfcheck"),
    )


def _selfcheck(table: Mapping[str, Any], where: str) -> SelfcheckPolicy:
    policy = _dataclass(SelfcheckPolicy(), table, where)
    for name in ("min_nccl_busbw_gbps", "min_gloo_busbw_gbps", "nic_error_increase_max"):
        if getattr(policy, name) < 0:
            raise PolicyError(f"{where}.{name}: must be >= 0")
    for name in ("allreduce_mib", "memory_test_mib", "compute_relative_tolerance", "timeout_seconds"):
        if not 0 < getattr(policy, name) < 1e6:
            raise PolicyError(f"{where}.{name}: must be > 0")
    if not 1 <= policy.allreduce_iterations <= 1000 or not 16 <= policy.compute_matrix_size <= 65536:
        raise PolicyError(f"{where}: allreduce_iterations within 1-1000, compute_matrix_size within 16-65536")
    return policy


def _catalog_rule(entry: XidEntry) -> XidRule:
    if entry.fatal:
        severity = Severity.CRITICAL
    elif entry.error_class in ("informational", "side_effect"):
        severity = Severity.INFO
    else:
        severity = Severity.WARNING
    return XidRule(
        xid=entry.xid,
        name=entry.name,
        severity=severity,
        action=RepairAction(entry.action),
        application=entry.error_class in ("application", "side_effect"),
    )


def _xid_rule(base: XidRule, table: Mapping[str, Any], where: str) -> XidRule:
    _known(table, _XID_KEYS, where)
    return replace(
        base,
        name=_string(table, "name", where, base.name),
        severity=_enum(table, "severity", where, Severity, base.severity),
        action=_enum(table, "action", where, RepairAction, base.action),
        min_count=_count(table, "min_count", where, base.min_count),
        count_window_seconds=_number(table, "count_window_seconds", where, base.count_window_seconds),
        sticky_seconds=_number(table, "sticky_seconds", where, base.sticky_seconds),
        application=_bool(table, "application", where, base.application),
        storm_lines=_count(table, "storm_lines", where, base.storm_lines, minimum=0),
    )


def _event_rule(name: str, table: Mapping[str, Any], where: str) -> EventRule:
    _known(table, {"severity", "action", "min_count", "count_window_seconds"}, where)
    return EventRule(
        kind=name,
        severity=_enum(table, "severity", where, Severity, Severity.WARNING),
        action=_enum(table, "action", where, RepairAction, RepairAction.WATCH),
        min_count=_count(table, "min_count", where, 1),
        count_window_seconds=_number(table, "count_window_seconds", where, 3600.0),
    )


def _counter_rule(name: str, table: Mapping[str, Any], where: str) -> CounterRule:
    _known(table, {"fatal_on_increase", "warn_rate_per_second", "critical_rate_per_second", "action"}, where)
    rule = CounterRule(
        counter=name,
        fatal_on_increase=_bool(table, "fatal_on_increase", where, False),
        warn_rate_per_second=_optional_number(table, "warn_rate_per_second", where),
        critical_rate_per_second=_optional_number(table, "critical_rate_per_second", where),
        action=_enum(table, "action", where, RepairAction, RepairAction.INSPECT),
    )
    if (
        not rule.fatal_on_increase
        and rule.warn_rate_per_second is None
        and rule.critical_rate_per_second is None
    ):
        raise PolicyError(f"{where}: needs fatal_on_increase or a rate threshold")
    return rule


def _finding_rule(name: str, table: Mapping[str, Any], where: str) -> FindingRule:
    _known(table, {"severity", "action"}, where)
    return FindingRule(
        kind=name,
        severity=_enum(table, "severity", where, Severity, Severity.WARNING),
        action=_enum(table, "action", where, RepairAction, RepairAction.WATCH),
    )


def _cancellations(raw: Any, where: str) -> tuple[Cancellation, ...]:
    if not isinstance(raw, list):
        raise PolicyError(f"{where}: expected [[cancellations]] tables")
    out = []
    for index, item in enumerate(raw):
        key = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise PolicyError(f"{key}: expected a table")
        _known(item, {"fault", "by"}, key)
        fault, by = _string(item, "fault", key, ""), _string(item, "by", key, "")
        if not fault or not by:
            raise PolicyError(f"{key}: needs both fault and by")
        out.append(Cancellation(fault, by))
    return tuple(out)


def _escalation(table: Mapping[str, Any], where: str) -> Escalation:
    _known(table, {"ladder", "returns", "window_seconds"}, where)
    base = Escalation()
    ladder = _enum_list(table, "ladder", where, base.ladder)
    if not ladder:
        raise PolicyError(f"{where}.ladder: must name at least one action")
    return Escalation(
        ladder=ladder,
        returns=_count(table, "returns", where, base.returns),
        window_seconds=_number(table, "window_seconds", where, base.window_seconds),
    )


def _breaker(table: Mapping[str, Any], where: str) -> BreakerPolicy:
    actions = _enum_list(table, "actions", where, BreakerPolicy().actions)
    rest = {k: v for k, v in table.items() if k != "actions"}
    policy = _dataclass(BreakerPolicy(), rest, where, skip={"actions"})
    if not 0.0 < policy.max_host_fraction <= 1.0:
        raise PolicyError(f"{where}.max_host_fraction: must be within (0, 1]")
    if not 0.0 <= policy.repairs_fraction_per_hour <= 1.0:
        raise PolicyError(f"{where}.repairs_fraction_per_hour: must be within [0, 1]")
    if not 60.0 <= policy.fleet_seconds <= 365 * 86400.0:
        raise PolicyError(f"{where}.fleet_seconds: must be within [60, 31536000] (a minute to a year)")
    return replace(policy, actions=actions)


def _retry(table: Mapping[str, Any], where: str) -> RetryPolicy:
    actions = _enum_list(table, "actions", where, RetryPolicy().actions)
    rest = {k: v for k, v in table.items() if k != "actions"}
    policy = _dataclass(RetryPolicy(), rest, where, skip={"actions"})
    if not 1 <= policy.attempts <= 20:
        raise PolicyError(f"{where}.attempts: must be within 1..20 (1: never retried)")
    if not 1.0 <= policy.first_delay_seconds <= 86400.0:
        raise PolicyError(f"{where}.first_delay_seconds: must be within 1..86400")
    return replace(policy, actions=actions)


def _named(document: Mapping[str, Any], section: str, where: str, build: Any) -> dict[str, Any]:
    out = {}
    for name, table in _table(document, section, where).items():
        key = f"{where}.{section}.{name}"
        if not isinstance(table, Mapping):
            raise PolicyError(f"{key}: expected a table")
        out[name] = build(name, table, key)
    return out


T = TypeVar("T", bound=DataclassRecord)


def _dataclass(
    base: T, table: Mapping[str, Any], where: str, skip: frozenset[str] | set[str] = frozenset()
) -> T:
    """Override scalar fields of a frozen dataclass from a table, each checked against its default's type."""
    names = {f.name for f in fields(base)} - set(skip)
    _known(table, names, where)
    changes: dict[str, Any] = {}
    for name in table:
        current = getattr(base, name)
        if isinstance(current, RepairAction):
            changes[name] = _enum(table, name, where, RepairAction, current)
        elif isinstance(current, bool):
            changes[name] = _bool(table, name, where, current)
        elif isinstance(current, int):
            changes[name] = _count(table, name, where, current, minimum=0)
        else:
            changes[name] = _number(table, name, where, float(current))
    return replace(base, **changes)


def _known(table: Mapping[str, Any], known: Iterable[str], where: str) -> None:
    allowed = set(known)
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PolicyError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(allowed))})")


def _table(document: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = document.get(name, {})
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}.{name}: expected a table")
    return value


def _number(table: Mapping[str, Any], name: str, where: str, default: float) -> float:
    if name not in table:
        return default
    value = table[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise PolicyError(f"{where}.{name}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _optional_number(table: Mapping[str, Any], name: str, where: str) -> float | None:
    return _number(table, name, where, 0.0) if name in table else None


def _count(table: Mapping[str, Any], name: str, where: str, default: int, minimum: int = 1) -> int:
    if name not in table:
        return default
    value = table[name]
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 2**31:
        raise PolicyError(f"{where}.{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def _bool(table: Mapping[str, Any], name: str, where: str, default: bool) -> bool:
    value = table.get(name, default)
    if not isinstance(value, bool):
        raise PolicyError(f"{where}.{name}: expected true or false, got {value!r}")
    return value


def _string(table: Mapping[str, Any], name: str, where: str, default: str) -> str:
    value = table.get(name, default)
    if not isinstance(value, str) or len(value) > 200:
        raise PolicyError(f"{where}.{name}: expected a string (at most 200 characters), got {value!r}")
    return value


def _enum(table: Mapping[str, Any], name: str, where: str, kind: type[E], default: E) -> E:
    if name not in table:
        return default
    value = table[name]
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise PolicyError(f"{where}.{name}: {value!r} is not one of {choices}") from None


def _enum_list(
    table: Mapping[str, Any], name: str, where: str, default: tuple[RepairAction, ...]
) -> tuple[RepairAction, ...]:
    if name not in table:
        return default
    value = table[name]
    if not isinstance(value, list):
        raise PolicyError(f"{where}.{name}: expected a list of actions")
    return tuple(_enum({name: v}, name, where, RepairAction, RepairAction.NONE) for v in value)
