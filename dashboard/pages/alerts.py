"""`/alerts`: webhook deliveries: the outbox by endpoint and status, every attempt, dead letters and their
replay (with the operator token)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import dash
from dash import Input, Output, State, dcc, html

from dashboard.components import Col, ago, empty, href, md_link, section, stat_card, table, when
from dashboard.context import DashboardContext, current
from dashboard.pages.live import PageSpec, Params, render_safely
from dashboard.queries.alerts import AlertRow, Attempt, alerts, attempts, outbox_status
from dashboard.queries.base import tables
from fleetguard.alerts.silence_rules import Silence
from fleetguard.alerts.silences import active_silences

HISTORY_SECONDS: Final = 86400.0
NO_DATA: Final = (
    "no alerts data yet: no webhook is configured, or the incident engine has not written to this store"
)
STATUSES: Final = ("pending", "delivered", "dead", "gone", "silenced")


def render(ctx: DashboardContext, _params: Params) -> Any:
    now = ctx.now()
    with ctx.cursor() as cur:
        if "alert_outbox" not in tables(cur):
            return empty(NO_DATA)
        status = outbox_status(cur)
        recent = alerts(cur, now - HISTORY_SECONDS)
        tries = attempts(cur, now - HISTORY_SECONDS, now)
        muted = active_silences(cur, now) if "alert_silences" in tables(cur) else []
    totals: Counter[str] = Counter()
    for s in status:
        totals[s.status] += s.alerts
    failed = sum(1 for t in tries if t.outcome not in ("delivered", "ok", "success"))
    return [
        html.Div(
            [
                stat_card(
                    "Pending",
                    str(totals["pending"]),
                    "waiting to be sent or retried",
                    card_id="card-alerts-pending",
                ),
                stat_card("Delivered", str(totals["delivered"]), "all time"),
                stat_card(
                    "Dead letters",
                    str(totals["dead"] + totals["gone"]),
                    f"{totals['gone']} to endpoints gone (410)",
                    card_id="card-alerts-dead",
                ),
                stat_card(
                    "Attempts (24 h)",
                    str(len(tries)),
                    f"{failed} did not deliver",
                    card_id="card-alerts-attempts",
                ),
            ],
            className="cards",
        ),
        section("By endpoint", _endpoint_table(status, now), section_id="alerts-endpoints"),
        section(
            "Alerts (24 h, and every one not delivered)", _alerts_table(recent, now), section_id="alerts-list"
        ),
        section("Active silences", _silences_table(muted), section_id="alerts-silences"),
        section("Delivery attempts (24 h)", _attempts_table(tries), section_id="alerts-attempts"),
    ]


def _silences_table(rows: list[Silence]) -> Any:
    """What the relay mutes now, by whom and why (`fleetguard alerts silence`, or an incident's page)."""
    data = [
        {
            "silence": s.silence_id,
            "matches": s.describe(),
            "until": when(s.expires_at),
            "by": s.created_by,
            "reason": s.reason[:200],
        }
        for s in rows
    ]
    cols = [
        Col("silence", "silence"),
        Col("matches", "matches"),
        Col("until (UTC)", "until"),
        Col("by", "by"),
        Col("reason", "reason", wide=True),
    ]
    return table("alerts-silences-table", cols, data, page_size=10)


def _endpoint_table(status: list[Any], now: float) -> Any:
    rows = [
        {"endpoint": s.endpoint, "status": s.status, "alerts": s.alerts, "oldest": ago(now - s.oldest)}
        for s in status
    ]
    cols = [
        Col("endpoint", "endpoint"),
        Col("status", "status"),
        Col("alerts", "alerts", "int"),
        Col("oldest", "oldest"),
    ]
    return table("alerts-endpoint-table", cols, rows, page_size=10)


def _alerts_table(rows: list[AlertRow], now: float) -> Any:
    data = [
        {
            "created": ago(now - a.created_at),
            "incident": md_link(a.incident_id, href("incidents", a.incident_id)),
            "event": a.event,
            "severity": a.severity,
            "endpoint": a.endpoint,
            "status": a.status,
            "attempts": a.attempts,
            "delivered": when(a.delivered_at),
            "error": a.last_error[:200],
        }
        for a in rows
    ]
    cols = [
        Col("created", "created"),
        Col("incident", "incident", "link"),
        Col("event", "event"),
        Col("severity", "severity"),
        Col("endpoint", "endpoint"),
        Col("status", "status"),
        Col("attempts", "attempts", "int"),
        Col("delivered (UTC)", "delivered"),
        Col("last error", "error"),
    ]
    return table("alerts-table", cols, data, page_size=15)


def _attempts_table(rows: list[Attempt]) -> Any:
    data = [
        {
            "time": when(t.ts),
            "alert": t.alert_id,
            "endpoint": t.endpoint,
            "attempt": t.attempt,
            "code": t.status_code,
            "outcome": t.outcome,
            "seconds": round(t.duration_seconds, 3),
            "error": t.error[:200],
        }
        for t in rows
    ]
    cols = [
        Col("time (UTC)", "time"),
        Col("alert", "alert"),
        Col("endpoint", "endpoint"),
        Col("attempt", "attempt", "int"),
        Col("HTTP", "code", "int"),
        Col("outcome", "outcome"),
        Col("seconds", "seconds", "number", 3),
        Col("error", "error"),
    ]
    return table("alerts-attempts-table", cols, data, page_size=15)


def replay_form(_ctx: DashboardContext, _params: Params) -> Any:
    return section(
        "Replay dead letters",
        html.Div(
            [
                dcc.Input(
                    id="alerts-token", type="password", placeholder="operator token", autoComplete="off"
                ),
                dcc.Input(
                    id="alerts-endpoint",
                    type="text",
                    placeholder="endpoint (empty: every endpoint)",
                    maxLength=2048,
                ),
                html.Button("Replay", id="alerts-replay", n_clicks=0),
            ],
            className="action-row",
        ),
        html.Div("", id="alerts-replay-result"),
        section_id="alerts-replay-form",
    )


def register_replay_callback(app: dash.Dash) -> None:
    @app.callback(  # type: ignore[misc]
        Output("alerts-replay-result", "children"),
        Output("alerts-body", "children", allow_duplicate=True),
        Input("alerts-replay", "n_clicks"),
        State("alerts-token", "value"),
        State("alerts-endpoint", "value"),
        prevent_initial_call=True,
    )
    def replay(clicks: int, token: object, endpoint: object) -> tuple[Any, Any]:
        ctx = current()
        result = ctx.desk.replay_dead_letters(
            token, endpoint.strip()[:2048] if isinstance(endpoint, str) else None
        )
        shown = html.Span(result.message, className="accepted" if result.accepted else "refused")
        setattr(shown, "data-attempt", str(clicks))  # a data-* attribute has no keyword argument
        return shown, render_safely(PAGE, ctx, {}) if result.accepted else dash.no_update


PAGE = PageSpec(
    page_id="alerts",
    name="Alerts",
    path="/alerts",
    render=render,
    static=replay_form,
    callbacks=register_replay_callback,
)
