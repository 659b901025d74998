"""`/incidents` and `/incidents/<id>`: the filterable list; one incident with its evidence, action ledger and
outcomes, and the operator's acknowledge / silence / resolve (with the token; read-only without)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

import dash
from dash import Input, Output, State, dcc, html
from dash import ctx as callback_context

from dashboard.components import Col, ago, empty, gpu_text, href, md_link, section, stat_card, table, when
from dashboard.context import DashboardContext, current
from dashboard.fleet_view import GpuView
from dashboard.operator import OperatorAction
from dashboard.pages.live import PageSpec, Params, render_safely
from dashboard.queries.base import tables
from dashboard.queries.incidents import (
    EvidenceRow,
    IncidentRow,
    LedgerRow,
    OperatorRow,
    evidence,
    incident,
    incidents,
    ledger,
    operator_actions,
)
from fleetguard.records.evidence import UnreadableEvidence, read_evidence

HISTORY_SECONDS: Final = 86400.0
SEVERITIES: Final = ("critical", "warning", "info")
EVIDENCE_CHARS: Final = 2000  # of one evidence row's values, wrapped in its cell
NO_DATA: Final = "no incidents data yet: the incident engine has not written to this store"


def gpu_names(gpus: Iterable[GpuView]) -> dict[str, str]:
    """uuid -> "GPU <index>" for the GPUs of the fleet model (their host is in a column of its own)."""
    return {g.state.uuid: f"GPU {g.state.gpu_index}" for g in gpus}


def component_link(kind: str, component_id: str, host: str, names: Mapping[str, str]) -> str:
    if kind == "gpu":
        return md_link(gpu_text(component_id, names), href("gpus", component_id))
    if kind == "job":
        return md_link(component_id, href("jobs", component_id))
    return md_link(f"{component_id} ({kind})", href("hosts", host))


def operator_state(rows: list[OperatorRow], now: float) -> dict[str, str]:
    """Per incident, what operators last said: "acknowledged", "silenced until ..."."""
    out: dict[str, str] = {}
    for r in rows:  # newest first
        if r.incident_id in out:
            continue
        if r.action == OperatorAction.SILENCE and r.silence_until is not None and r.silence_until > now:
            out[r.incident_id] = f"silenced until {when(r.silence_until)}"
        elif r.action == OperatorAction.ACKNOWLEDGE:
            out[r.incident_id] = "acknowledged"
    return out


def render_list(ctx: DashboardContext, _params: Params) -> Any:
    now = ctx.now()
    with ctx.cursor() as cur:
        if "incidents" not in tables(cur):
            return empty(NO_DATA)
        rows = incidents(cur, now - HISTORY_SECONDS)
        ops = (
            operator_actions(cur, [r.incident_id for r in rows]) if "operator_actions" in tables(cur) else []
        )
    marks = operator_state(ops, now)
    names = gpu_names(ctx.fleet.get().gpus) if any(r.component_kind == "gpu" for r in rows) else {}
    active = [r for r in rows if r.state in ("open", "acting")]
    by_severity = Counter(r.severity for r in active)
    return [
        html.Div(
            [
                stat_card(
                    "Active incidents",
                    str(len(active)),
                    ", ".join(f"{by_severity[s]} {s}" for s in SEVERITIES if by_severity[s]) or "none",
                    card_id="card-incidents-active",
                ),
                stat_card(
                    "Resolved (24 h)",
                    str(sum(1 for r in rows if r.state in ("resolved", "closed"))),
                    "healthy again, cancelled or by an operator",
                ),
                stat_card(
                    "Acknowledged",
                    str(sum(1 for i in marks.values() if i == "acknowledged")),
                    "by an operator",
                ),
            ],
            className="cards",
        ),
        section(
            "Incidents (active, then the last 24 h)",
            incidents_table("incidents-table", rows, marks, now, names),
            section_id="incidents-list",
        ),
    ]


def incidents_table(
    table_id: str,
    rows: list[IncidentRow],
    marks: dict[str, str],
    now: float,
    names: Mapping[str, str],
) -> Any:
    """`names`: uuid -> "GPU <index>" for the GPUs the rows may name (`gpu_names`)."""
    data = [
        {
            "incident": md_link(r.incident_id, href("incidents", r.incident_id)),
            "severity": r.severity,
            "state": r.state,
            "operator": marks.get(r.incident_id, ""),
            "host": md_link(r.host, href("hosts", r.host)),
            "component": component_link(r.component_kind, r.component_id, r.host, names),
            "fault": r.fault,
            "summary": r.summary[:200],
            "count": r.occurrences,
            "action": r.action,
            "last": ago(now - r.last_seen),
        }
        for r in rows
    ]
    cols = [
        Col("incident", "incident", "link"),
        Col("severity", "severity"),
        Col("state", "state"),
        Col("operator", "operator"),
        Col("host", "host", "link"),
        Col("component", "component", "link"),
        Col("fault", "fault"),
        Col("summary", "summary", wide=True),
        Col("count", "count", "int"),
        Col("action", "action"),
        Col("last seen", "last"),
    ]
    return table(table_id, cols, data, page_size=20)


def render_incident(ctx: DashboardContext, params: Params) -> Any:
    incident_id = params["incident"]
    now = ctx.now()
    with ctx.cursor() as cur:
        present = tables(cur)
        if "incidents" not in present:
            return empty(NO_DATA)
        row = incident(cur, incident_id)
        if row is None:
            return html.Div([html.H1(incident_id), empty("no such incident")])
        proof = evidence(cur, incident_id)
        actions = ledger(cur, incident_id)
        ops = operator_actions(cur, [incident_id]) if "operator_actions" in present else []
    mark = operator_state(ops, now).get(incident_id, "")
    names = gpu_names(ctx.fleet.get().gpus) if row.component_kind == "gpu" else {}
    return [
        html.Div(
            [
                html.H1(f"incident {row.incident_id}"),
                html.Span(row.severity, className=f"chip sev-{row.severity}"),
                html.Span(row.state, className="badge state", id="incident-state"),
                html.Span(mark, className="reason", id="incident-operator-state"),
            ],
            className="title-row",
        ),
        html.Div(row.summary, className="summary"),
        html.Div(
            [
                stat_card("Host", row.host, dcc.Link("host page", href=href("hosts", row.host))),
                stat_card(
                    "Component",
                    names.get(row.component_id, row.component_kind),
                    _component_page(row),
                    card_id="card-incident-component",
                ),
                stat_card("Fault", row.fault, f"rule {row.rule}"),
                stat_card(
                    "Occurrences",
                    str(row.occurrences),
                    f"returned {row.returns} times · escalation step {row.escalation_step}",
                ),
                stat_card("First seen", ago(now - row.first_seen), when(row.first_seen)),
                stat_card("Last seen", ago(now - row.last_seen), when(row.last_seen)),
                stat_card(
                    "Recommended",
                    row.action,
                    f"resolved {when(row.resolved_at)} ({row.resolution})"
                    if row.resolved_at
                    else "not resolved",
                ),
            ],
            className="cards",
        ),
        html.Div(
            [
                section("Action ledger", _ledger_table(actions), section_id="incident-ledger"),
                section("Operator actions", _operator_table(ops), section_id="incident-operator"),
            ],
            className="two-col",
        ),
        section("Evidence (captured when it opened)", _evidence_view(proof), section_id="incident-evidence"),
    ]


def _component_page(row: IncidentRow) -> Any:
    if row.component_kind == "gpu":
        return dcc.Link(row.component_id, href=href("gpus", row.component_id))
    if row.component_kind == "job":
        return dcc.Link(row.component_id, href=href("jobs", row.component_id))
    return row.component_id


def _ledger_table(rows: list[LedgerRow]) -> Any:
    data = [
        {
            "requested": when(r.requested_at),
            "action": r.action,
            "rule": r.rule,
            "outcome": r.outcome,
            "finished": when(r.finished_at),
            "returned": "yes" if r.fault_returned else "no",
            "detail": r.detail[:200],
        }
        for r in rows
    ]
    cols = [
        Col("requested", "requested"),
        Col("action", "action"),
        Col("rule", "rule"),
        Col("outcome", "outcome"),
        Col("finished", "finished"),
        Col("fault came back", "returned"),
        Col("detail", "detail", wide=True),
    ]
    return table("incident-ledger-table", cols, data, page_size=10)


def _operator_table(rows: list[OperatorRow]) -> Any:
    data = [
        {
            "time": when(r.ts),
            "action": r.action,
            "outcome": r.outcome,
            "until": when(r.silence_until) if r.silence_until else "",
            "note": r.note,
        }
        for r in rows
    ]
    cols = [
        Col("time (UTC)", "time"),
        Col("action", "action"),
        Col("outcome", "outcome"),
        Col("silenced until", "until"),
        Col("note", "note"),
    ]
    return table("incident-operator-table", cols, data, page_size=10)


def _evidence_view(rows: list[EvidenceRow]) -> Any:
    if not rows:
        return empty("no evidence stored")
    kinds = Counter(r.kind for r in rows)
    data = [{"time": when(r.ts), "kind": r.kind, "detail": _compact(r.detail_json)} for r in rows]
    return [
        html.Div(", ".join(f"{n} {k}" for k, n in kinds.most_common()), className="muted"),
        table(
            "incident-evidence-table",
            [Col("time (UTC)", "time"), Col("kind", "kind"), Col("detail", "detail", wide=True)],
            data,
            page_size=10,
        ),
    ]


def _compact(detail_json: str) -> str:
    evidence = read_evidence(detail_json)
    if isinstance(evidence, UnreadableEvidence):
        return evidence.text[:EVIDENCE_CHARS]
    shown = {k: v for k, v in evidence.items() if v not in (None, "", [], {})}
    return ", ".join(f"{k}={v}" for k, v in shown.items())[:EVIDENCE_CHARS]


def action_form(_ctx: DashboardContext, _params: Params) -> Any:
    """Drawn once (outside the refreshed body), so a token being typed survives a live refresh."""
    return section(
        "Operator actions",
        html.Div(
            [
                dcc.Input(
                    id="incident-token", type="password", placeholder="operator token", autoComplete="off"
                ),
                dcc.Input(id="incident-note", type="text", placeholder="note (optional)", maxLength=500),
                dcc.Dropdown(
                    id="incident-silence-minutes",
                    options=[
                        {"label": f"silence {m // 60} h" if m >= 60 else f"silence {m} min", "value": m}
                        for m in (30, 60, 240, 1440)
                    ],
                    value=60,
                    clearable=False,
                    style={"width": "160px"},
                ),
                html.Button("Acknowledge", id="incident-ack", n_clicks=0),
                html.Button("Silence", id="incident-silence", n_clicks=0),
                html.Button("Resolve", id="incident-resolve", n_clicks=0),
            ],
            className="action-row",
        ),
        html.Div("", id="incident-action-result"),
        section_id="incident-actions",
    )


_BUTTONS: Final = {
    "incident-ack": OperatorAction.ACKNOWLEDGE,
    "incident-silence": OperatorAction.SILENCE,
    "incident-resolve": OperatorAction.RESOLVE,
}


def register_action_callback(app: dash.Dash) -> None:
    @app.callback(  # type: ignore[misc]
        Output("incident-action-result", "children"),
        Output("incident-body", "children", allow_duplicate=True),
        Output("incident-shape", "data", allow_duplicate=True),
        Input("incident-ack", "n_clicks"),
        Input("incident-silence", "n_clicks"),
        Input("incident-resolve", "n_clicks"),
        State("incident-token", "value"),
        State("incident-note", "value"),
        State("incident-silence-minutes", "value"),
        State("incident-key", "data"),
        prevent_initial_call=True,
    )
    def act(
        acks: int,
        silences: int,
        resolves: int,
        token: object,
        note: object,
        minutes: object,
        key: object,
    ) -> tuple[Any, Any, Any]:
        action = _BUTTONS.get(str(callback_context.triggered_id))
        incident_id = key.get("incident") if isinstance(key, dict) else None
        if action is None or not isinstance(incident_id, str):
            return html.Span("refused: unknown action", className="refused"), dash.no_update, dash.no_update
        result = current().desk.perform(
            incident_id[:256],
            action,
            token,
            note if isinstance(note, str) else "",
            float(minutes) if isinstance(minutes, int | float) and not isinstance(minutes, bool) else 0.0,
        )
        # The attempt number tells one answer from the next when both say the same thing.
        attempt = sum(n for n in (acks, silences, resolves) if isinstance(n, int))
        shown = html.Span(result.message, className="accepted" if result.accepted else "refused")
        setattr(shown, "data-attempt", str(attempt))  # a data-* attribute has no keyword argument
        if not result.accepted:
            return shown, dash.no_update, dash.no_update
        # An accepted action redraws the page body (the operator table, the state) at once; what the
        # browser held of the old body is forgotten, so the next live refresh sends the whole body again.
        return shown, render_safely(INCIDENT_PAGE, current(), {"incident": incident_id[:256]}), None


LIST_PAGE = PageSpec(page_id="incidents", name="Incidents", path="/incidents", render=render_list)
INCIDENT_PAGE = PageSpec(
    page_id="incident",
    name="Incident",
    path="/incidents/incident",
    path_template="/incidents/<incident>",
    render=render_incident,
    path_vars=("incident",),
    nav=False,
    static=action_form,
    callbacks=register_action_callback,
)
