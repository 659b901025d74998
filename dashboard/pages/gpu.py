"""`/gpus/<uuid>`: one GPU over time: telemetry with its events on the time axis, memory errors, risk."""

from __future__ import annotations

from typing import Any, Final

from dash import dcc, html

from dashboard import figures
from dashboard.bar_chart import Bar, bar_chart
from dashboard.components import Col, ago, badge, graph, href, section, stat_card, table, when
from dashboard.context import DashboardContext
from dashboard.fleet_view import gpu_views
from dashboard.health import COLOURS, Health, throttle_text
from dashboard.pages.host import events_table
from dashboard.pages.incidents import NO_DATA, incidents_table
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.base import tables
from dashboard.queries.events import event_counts, recent_events
from dashboard.queries.findings import FindingRow, recent_findings
from dashboard.queries.gpus import (
    LIVE_WINDOW_SECONDS,
    gpu_now,
    gpu_series,
    series_source,
)
from dashboard.queries.incidents import IncidentRow, incidents
from dashboard.queries.predictions import Risk, drivers, latest_risks, risk_history

WINDOWS: Final = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 86400.0}
DEFAULT_WINDOW: Final = "1h"  # raw samples, time-bounded; 24 h reads the hourly rollup where kept
FAULT_WINDOW_SECONDS: Final = 3600.0


def render(ctx: DashboardContext, params: Params) -> Any:
    uuid = params["uuid"]
    window = params.get("window") if params.get("window") in WINDOWS else DEFAULT_WINDOW
    span = WINDOWS[str(window)]
    now = ctx.now()
    model = ctx.fleet.at_hand()  # where the GPU reports, if the fleet model knows: its rows are sought there
    with ctx.cursor() as cur:
        found = gpu_now(cur, uuid, now - span, now, model.gpu_hosts.get(uuid) if model else None)
        if found is None:
            return html.Div(
                [html.H1(uuid), html.Div(f"no samples from this GPU in the last {window}", className="empty")]
            )
        ident = found.identity
        present = tables(cur)
        counts = event_counts(cur, now - FAULT_WINDOW_SECONDS, now, ident.host)
        risks = [r for r in latest_risks(cur, now, ident.host) if r.device_id == uuid]
        series = gpu_series(cur, uuid, ident.host, now - span, now, series_source(present, span))
        events = recent_events(cur, now - span, now, ident.host, ident.gpu_index)
        risk_points = risk_history(cur, uuid, ident.host, now - span, now)
        findings = recent_findings(cur, now - span, now, gpu_uuid=uuid)
        gpu_incidents = incidents(cur, now - 86400, component_id=uuid) if "incidents" in present else None
    states = [found.state] if found.state is not None else []
    views = gpu_views(states, counts, {r.device_id: r.risk for r in risks}, now, ctx.risk_threshold)
    view = views[0] if views else None
    title = html.Div(
        [
            html.H1([dcc.Link(ident.host, href=href("hosts", ident.host)), f" / GPU {ident.gpu_index}"]),
            badge(view.health) if view else badge("silent"),
            html.Span(
                view.reason if view else f"no sample in {LIVE_WINDOW_SECONDS / 60:.0f} min",
                className="reason",
            ),
        ],
        className="title-row",
    )
    latest = view.state if view else None
    return [
        title,
        html.Div(
            [
                stat_card(
                    "Model",
                    ident.name or "?",
                    f"serial {ident.serial or '?'} · driver {ident.driver_version or '?'}",
                ),
                stat_card("UUID", ident.uuid[:18] + "…", f"PCI {ident.pci_bus_id or '?'}"),
                stat_card(
                    "Temperature",
                    _num(latest.temperature_celsius if latest else None, "°C"),
                    f"power {_num(latest.power_watts if latest else None, 'W')}",
                ),
                stat_card(
                    "Throttle",
                    throttle_text(latest.clocks_event_reasons) if latest else "?",
                    f"SM {latest.sm_clock_mhz if latest else '?'} MHz",
                ),
                stat_card(
                    "Risk",
                    _num(view.risk if view else None, "", 3),
                    f"threshold {ctx.risk_threshold:g}",
                    card_id="card-gpu-risk",
                ),
                stat_card("Last sample", ago(now - ident.last_ts), when(ident.last_ts)),
            ],
            className="cards",
        ),
        html.Div(
            [
                dcc.Link(
                    w,
                    href=f"{href('gpus', uuid)}?window={w}",
                    className="window" + (" active" if w == window else ""),
                )
                for w in WINDOWS
            ],
            className="windows",
        ),
        section(
            f"Over time ({window}): telemetry, memory errors and failure risk, with events",
            graph(
                figures.gpu_over_time(series, events, risk_points, ctx.risk_threshold),
                "gpu-timeseries",
            ),
        ),
        section("What drives the failure risk", _risk(risks), section_id="gpu-risk"),
        section(
            "Incidents",
            _incidents(gpu_incidents, now, {uuid: f"GPU {ident.gpu_index}"}),
            section_id="gpu-incidents",
        ),
        section("Findings", _findings_table(findings, now), section_id="gpu-findings"),
        section(f"Events ({window})", events_table("gpu-events-table", events)),
    ]


def _risk(risks: list[Risk]) -> Any:
    """The newest score against the fleet's base rate and the features that push it (its history is a row
    of the figure above)."""
    if not risks:
        return html.Div("no risk scores for this GPU", className="empty")
    out: list[Any] = []
    r = risks[0]
    if r.base_rate is not None:
        out.append(
            html.P(
                f"risk {r.risk:.1%} of a failure within {r.horizon_hours:g} h; fleet base rate "
                f"{r.base_rate:.1%}",
                id="gpu-risk-base-rate",
            )
        )
    why = drivers(r.explanations)[:8]
    if why:
        # Red pushes the risk up, green down; in HTML, a second plotly figure drew more slowly than it.
        bars = [
            Bar(d.label(), d.contribution, COLOURS[Health.FAILED if d.contribution > 0 else Health.HEALTHY])
            for d in why
        ]
        out.append(bar_chart(bars, "gpu-risk-drivers", decimals=3, signed=True))
    return out or html.Div("no drivers recorded for the newest score", className="empty")


def _incidents(rows: list[IncidentRow] | None, now: float, names: dict[str, str]) -> Any:
    if rows is None:
        return html.Div(NO_DATA, className="empty")
    return incidents_table("gpu-incidents-table", rows, {}, now, names)


def _num(value: float | None, unit: str, decimals: int = 0) -> str:
    return "?" if value is None else f"{value:.{decimals}f} {unit}".strip()


def _findings_table(findings: list[FindingRow], now: float) -> Any:
    rows = [
        {"when": ago(now - f.ts), "severity": f.severity, "kind": f.kind, "summary": f.summary}
        for f in findings
    ]
    return table(
        "gpu-findings-table",
        [
            Col("when", "when"),
            Col("severity", "severity"),
            Col("kind", "kind"),
            Col("summary", "summary", wide=True),
        ],
        rows,
        page_size=8,
    )


PAGE = PageSpec(
    page_id="gpu",
    name="GPU",
    path="/gpus",
    path_template="/gpus/<uuid>",
    render=render,
    path_vars=("uuid",),
    query=("window",),
    nav=False,
)
