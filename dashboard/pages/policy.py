"""`/policy`: the diagnosis policy in force (rules as data), and how a candidate is compared by replay."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboard.components import Col, empty, section, stat_card, table
from dashboard.context import DashboardContext
from dashboard.pages.live import PageSpec, Params


def render(ctx: DashboardContext, _params: Params) -> Any:
    from fleetguard.incidents.policy_files import load_policy

    source = ctx.config.diagnosis.policy_file or "data/policy.toml (shipped)"
    try:
        policy = load_policy(ctx.config.diagnosis.policy_file or None, ctx.config.policy.tables)
    except Exception as exc:  # a bad policy file: say so in one line, as the CLI does
        return empty(f"the policy cannot be loaded: {type(exc).__name__}: {exc}")
    b, esc, life = policy.breaker, policy.escalation, policy.lifecycle
    return [
        html.Div(
            [
                stat_card(
                    "Source",
                    source[:40],
                    "overlaid by [policy] tables in the config" if ctx.config.policy.tables else "",
                ),
                stat_card(
                    "Breaker",
                    f"{b.max_host_fraction:.0%} of hosts",
                    f"in {b.window_seconds:g} s, at least {b.min_hosts} hosts",
                ),
                stat_card(
                    "Repair rate",
                    f"{b.repairs_per_hour}/h",
                    f"or {b.repairs_fraction_per_hour:.0%} of hosts per hour",
                ),
                stat_card(
                    "Escalation",
                    " → ".join(a.value for a in esc.ladder),
                    f"after {esc.returns} returns in {esc.window_seconds / 86400:g} d",
                ),
                stat_card(
                    "Lifecycle",
                    f"resolved after {life.resolve_healthy_seconds:g} s",
                    f"closed after {life.close_after_seconds:g} s",
                ),
            ],
            className="cards",
        ),
        section("XID rules", _xid_table(policy), section_id="policy-xid"),
        html.Div(
            [
                section("Counter rules", _counter_table(policy)),
                section("Event rules", _event_table(policy)),
            ],
            className="two-col",
        ),
        section(
            "Trying a candidate policy",
            html.P(
                "Replay a candidate against recorded history before using it: "
                "`fleetguard policy replay --store STORE --since 30d --policy candidate.toml` reports the "
                "incidents, actions and alerts each policy would have made and their difference."
            ),
        ),
    ]


def _xid_table(policy: Any) -> Any:
    rows = [
        {
            "xid": r.xid,
            "name": r.name,
            "severity": r.severity.value,
            "action": r.action.value,
            "min_count": r.min_count,
            "window_h": r.count_window_seconds / 3600,
            "sticky_h": r.sticky_seconds / 3600,
            "application": "yes" if r.application else "",
        }
        for r in sorted(policy.xid.values(), key=lambda r: r.xid)
    ]
    cols = [
        Col("XID", "xid", "int"),
        Col("name", "name"),
        Col("severity", "severity"),
        Col("action", "action"),
        Col("min count", "min_count", "int"),
        Col("window h", "window_h", "number", 1),
        Col("sticky h", "sticky_h", "number", 1),
        Col("application", "application"),
    ]
    return table("policy-xid-table", cols, rows, page_size=15)


def _counter_table(policy: Any) -> Any:
    rows = [
        {
            "counter": r.counter,
            "fatal": "yes" if r.fatal_on_increase else "",
            "warn": r.warn_rate_per_second,
            "critical": r.critical_rate_per_second,
            "action": r.action.value,
        }
        for r in policy.counters.values()
    ]
    cols = [
        Col("counter", "counter"),
        Col("fatal on increase", "fatal"),
        Col("warn /s", "warn", "number", 3),
        Col("critical /s", "critical", "number", 3),
        Col("action", "action"),
    ]
    return table("policy-counter-table", cols, rows, page_size=10)


def _event_table(policy: Any) -> Any:
    rows = [
        {
            "kind": r.kind,
            "severity": r.severity.value,
            "action": r.action.value,
            "min_count": r.min_count,
            "window_s": r.count_window_seconds,
        }
        for r in policy.events.values()
    ]
    cols = [
        Col("event", "kind"),
        Col("severity", "severity"),
        Col("action", "action"),
        Col("min count", "min_count", "int"),
        Col("window s", "window_s", "int"),
    ]
    return table("policy-event-table", cols, rows, page_size=10)


PAGE = PageSpec(page_id="policy", name="Policy", path="/policy", render=render)
