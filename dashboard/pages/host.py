"""`/hosts/<host>`: one host's GPUs and ports at a glance, its problems, events and the jobs on it."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from dash import html

from dashboard.components import (
    Col,
    ago,
    badge,
    empty,
    gib,
    health_breakdown,
    href,
    md_link,
    section,
    stat_card,
    table,
    when,
)
from dashboard.context import DashboardContext
from dashboard.fleet_view import GpuView, PortView, gpu_views, host_views, port_views
from dashboard.pages.incidents import NO_DATA, gpu_names, incidents_table
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.base import tables
from dashboard.queries.events import EventRow, event_counts, recent_events
from dashboard.queries.findings import FindingRow, recent_findings
from dashboard.queries.gpus import LIVE_WINDOW_SECONDS, latest_gpu_states
from dashboard.queries.incidents import incidents
from dashboard.queries.jobs import jobs
from dashboard.queries.network import port_counters, port_states
from dashboard.queries.predictions import latest_risks
from dashboard.snapshot import health_inputs

FAULT_WINDOW_SECONDS: Final = 3600.0
HISTORY_SECONDS: Final = 86400.0


def render(ctx: DashboardContext, params: Params) -> Any:
    host = params["host"]
    now = ctx.now()
    with ctx.cursor() as cur:
        states = latest_gpu_states(cur, now, host)
        counts = event_counts(cur, now - FAULT_WINDOW_SECONDS, now, host)
        risks = latest_risks(cur, now, host)
        open_now, liveness = health_inputs(cur, now, ctx.config.controller.silent_after_seconds, host)
        ports = port_views(
            port_states(cur, now - LIVE_WINDOW_SECONDS, now, host),
            port_counters(cur, now - FAULT_WINDOW_SECONDS, now, host),
            now,
            open_now,
            liveness,
        )
        events = recent_events(cur, now - HISTORY_SECONDS, now, host)
        findings = recent_findings(cur, now - HISTORY_SECONDS, now, host=host)
        job_rows = jobs(cur, now, host)
        host_incidents = (
            incidents(cur, now - HISTORY_SECONDS, host=host) if "incidents" in tables(cur) else None
        )
    risk_of = {r.device_id: r.risk for r in risks}
    gpus = gpu_views(states, counts, risk_of, now, ctx.risk_threshold, open_now, liveness)
    views = host_views(gpus, ports, open_now, liveness, now)
    if not views:
        return html.Div(
            [
                html.H1(host),
                html.Div(
                    f"no samples from {host} in the last {LIVE_WINDOW_SECONDS / 60:.0f} min",
                    className="empty",
                ),
            ]
        )
    view = views[0]
    return [
        html.Div(
            [html.H1(host), badge(view.health), html.Span(view.reason, className="reason")],
            className="title-row",
        ),
        html.Div(
            [
                stat_card(
                    "GPUs",
                    str(len(gpus)),
                    health_breakdown(Counter(g.health for g in gpus)),
                    card_id="card-host-gpus",
                ),
                stat_card(
                    "Ports",
                    str(len(ports)),
                    health_breakdown(Counter(p.health for p in ports)),
                    card_id="card-host-ports",
                ),
                stat_card("Events (24 h)", str(sum(e.count for e in events)), f"{len(events)} rows"),
                stat_card("Jobs", str(len(job_rows)), ", ".join(j.job_id for j in job_rows[:3])),
                stat_card("Last sample", ago(now - view.last_ts), when(view.last_ts)),
            ],
            className="cards",
        ),
        section("GPUs", _gpu_table(gpus), section_id="host-gpus"),
        section(
            "Incidents",
            incidents_table("host-incidents-table", host_incidents, {}, now, gpu_names(gpus))
            if host_incidents is not None
            else empty(NO_DATA),
            section_id="host-incidents",
        ),
        section("Ports", _port_table(ports), section_id="host-ports"),
        html.Div(
            [
                section("Findings (24 h)", _findings_table(findings, now)),
                section("Jobs on this host", _jobs_table(job_rows)),
            ],
            className="two-col",
        ),
        section("Events (24 h)", events_table("host-events-table", events)),
    ]


def _gpu_table(gpus: list[GpuView]) -> Any:
    rows = [
        {
            "gpu": md_link(f"GPU {g.state.gpu_index}", href("gpus", g.state.uuid)),
            "uuid": g.state.uuid,
            "health": g.health.value,
            "reason": g.reason,
            "util": g.state.utilization_gpu_percent,
            "temp": g.state.temperature_celsius,
            "power": g.state.power_watts,
            "mem": round(gib(g.state.memory_used_bytes), 1),
            "xids": g.xids,
            "risk": None if g.risk is None else round(g.risk, 3),
        }
        for g in gpus
    ]
    cols = [
        Col("GPU", "gpu", "link"),
        Col("UUID", "uuid"),
        Col("health", "health", "health"),
        Col("reason", "reason", wide=True),
        Col("util %", "util", "number", 0),
        Col("temp °C", "temp", "number", 0),
        Col("power W", "power", "number", 0),
        Col("memory GiB", "mem", "number", 1),
        Col("XIDs 1 h", "xids", "int"),
        Col("risk", "risk", "number", 3),
    ]
    return table("host-gpu-table", cols, rows, page_size=16)


def _port_table(ports: list[PortView]) -> Any:
    rows = [
        {
            "port": f"{p.state.device}/{p.state.port}",
            "health": p.health.value,
            "state": p.state.state or "?",
            "rate": p.state.rate_gbps,
            "errors": p.counters.errors if p.counters else 0,
            "flaps": p.counters.link_downed if p.counters else 0,
            "tx": round((p.counters.tx_bytes_per_second if p.counters else 0.0) / 1e9, 2),
            "rx": round((p.counters.rx_bytes_per_second if p.counters else 0.0) / 1e9, 2),
        }
        for p in ports
    ]
    cols = [
        Col("port", "port"),
        Col("health", "health", "health"),
        Col("state", "state"),
        Col("rate Gb/s", "rate", "number", 0),
        Col("errors 1 h", "errors", "int"),
        Col("link flaps 1 h", "flaps", "int"),
        Col("tx GB/s", "tx", "number", 2),
        Col("rx GB/s", "rx", "number", 2),
    ]
    return table("host-port-table", cols, rows, page_size=16)


def _findings_table(findings: list[FindingRow], now: float) -> Any:
    rows = [
        {"when": ago(now - f.ts), "severity": f.severity, "kind": f.kind, "summary": f.summary}
        for f in findings
    ]
    cols = [
        Col("when", "when"),
        Col("severity", "severity"),
        Col("kind", "kind"),
        Col("summary", "summary", wide=True),
    ]
    return table("host-findings-table", cols, rows, page_size=8)


def _jobs_table(job_rows: list[Any]) -> Any:
    rows = [
        {"job": md_link(j.job_id, href("jobs", j.job_id)), "ranks": j.ranks, "step": j.last_step}
        for j in job_rows
    ]
    return table(
        "host-jobs-table",
        [Col("job", "job", "link"), Col("ranks here", "ranks", "int"), Col("step", "step", "int")],
        rows,
        page_size=8,
    )


def events_table(table_id: str, events: list[EventRow]) -> Any:
    rows = [
        {
            "time": when(e.ts),
            "kind": e.kind,
            "code": e.code,
            "gpu": "" if e.gpu_index is None else str(e.gpu_index),
            "device": e.device or "",
            "count": e.count,
            "message": e.message[:300],
        }
        for e in events
    ]
    cols = [
        Col("time (UTC)", "time"),
        Col("kind", "kind"),
        Col("code", "code", "int"),
        Col("GPU", "gpu"),
        Col("device", "device"),
        Col("count", "count", "int"),
        Col("message", "message", wide=True),
    ]
    return table(table_id, cols, rows, page_size=10)


PAGE = PageSpec(
    page_id="host",
    name="Host",
    path="/hosts",
    path_template="/hosts/<host>",
    render=render,
    path_vars=("host",),
    nav=False,
)
