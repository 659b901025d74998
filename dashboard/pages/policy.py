"""`/policy`: the diagnosis policy in force (rules as data), and how a candidate is compared by replay."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, html

from dashboard.components import Col, empty, section, stat_card, table
from dashboard.context import DashboardContext, current
from dashboard.pages.live import PageSpec, Params
from dashboard.policy_replay import replay_candidate


def render(ctx: DashboardContext, _params: Params) -> Any:
    from fleetguard.settings.policy_files import load_policy

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


def replay_form(ctx: DashboardContext, _params: Params) -> Any:
    candidate = ctx.config.dashboard.candidate_policy_file
    hours = ctx.config.dashboard.replay_hours
    intro = (
        f"Replay the last {hours:g} h of recorded history through the policy in force and through the "
        f"candidate {candidate}, and see what each would have opened, done and alerted."
        if candidate
        else "Set [dashboard] candidate_policy_file to compare a candidate here; "
        "`fleetguard policy replay --policy FILE --since 30d` compares any policy over any span."
    )
    return section(
        "Candidate policy: replay against the current one",
        html.P(intro),
        html.Button("Replay", id="policy-replay", n_clicks=0, disabled=not candidate, className="action"),
        html.Div("", id="policy-replay-result"),
        section_id="policy-replay-form",
    )


def _summary_table(table_id: str, current: dict[str, Any], candidate: dict[str, Any], key: str) -> Any:
    names = sorted(set(current.get(key, {})) | set(candidate.get(key, {})))
    rows = [
        {"what": n, "current": current.get(key, {}).get(n, 0), "candidate": candidate.get(key, {}).get(n, 0)}
        for n in names
    ]
    cols = [
        Col(key.replace("_", " "), "what"),
        Col("current", "current", "int"),
        Col("candidate", "candidate", "int"),
    ]
    return table(table_id, cols, rows, page_size=10)


def register_replay_callback(app: dash.Dash) -> None:
    @app.callback(  # type: ignore[misc]
        Output("policy-replay-result", "children"),
        Input("policy-replay", "n_clicks"),
        prevent_initial_call=True,
    )
    def run(clicks: int) -> Any:
        outcome = replay_candidate(current())
        head = html.Div(outcome.message, className="accepted" if outcome.ok else "refused")
        setattr(head, "data-attempt", str(clicks))  # a data-* attribute has no keyword argument
        if not outcome.ok:
            return head
        diff = outcome.difference
        only = [{"incident": k, "raised by": "current only"} for k in diff["incidents_only_with_a"]] + [
            {"incident": k, "raised by": "candidate only"} for k in diff["incidents_only_with_b"]
        ]
        return [
            head,
            html.Div(
                f"incidents: current {outcome.current['incidents']}, "
                f"candidate {outcome.candidate['incidents']}; "
                f"openings {diff['openings']['a']} vs {diff['openings']['b']}",
                id="policy-replay-counts",
            ),
            table(
                "policy-replay-only",
                [Col("incident (host|component|fault)", "incident"), Col("raised by", "raised by")],
                only,
            ),
            html.Div(
                [
                    _summary_table("policy-replay-actions", outcome.current, outcome.candidate, "actions"),
                    _summary_table("policy-replay-alerts", outcome.current, outcome.candidate, "alerts"),
                ],
                className="two-col",
            ),
        ]


PAGE = PageSpec(
    page_id="policy",
    name="Policy",
    path="/policy",
    render=render,
    static=replay_form,
    callbacks=register_replay_callback,
)
