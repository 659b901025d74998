"""`/`: the fleet at a glance: hosts and GPUs by health, open problems, most at-risk GPUs, jobs, ingest."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dash import html

from dashboard.bar_chart import Bar, bar_chart
from dashboard.components import (
    Col,
    ago,
    as_of,
    health_breakdown,
    href,
    md_link,
    section,
    stat_card,
    table,
)
from dashboard.context import DashboardContext
from dashboard.fleet_view import GpuView, HostView, xid_classes
from dashboard.health import COLOURS, Health
from dashboard.pages.incidents import gpu_names
from dashboard.pages.jobs import job_state
from dashboard.pages.live import PageSpec, Params
from dashboard.problems import open_problems
from dashboard.queries.events import EventCount
from dashboard.queries.ingest import TableIngest, ingest
from dashboard.queries.jobs import JobSummary, jobs

FAULT_WINDOW_SECONDS = 3600.0
TOP_AT_RISK = 10


def render(ctx: DashboardContext, _params: Params) -> Any:
    model = ctx.fleet.get()
    now = model.now
    with ctx.cursor() as cur:
        job_rows = jobs(cur, now)
        problems = open_problems(cur, now, gpu_names(model.gpus))
        ingest_rows = ingest(cur, now)
    gpus, hosts, events = model.gpus, model.hosts, model.events
    host_counts = Counter(h.health for h in hosts)
    gpu_counts = Counter(g.health for g in gpus)
    return [
        as_of(model.now, ctx.now()),
        html.Div(
            [
                stat_card(
                    "Hosts",
                    str(len(hosts)),
                    health_breakdown(host_counts),
                    health=_headline(host_counts),
                    card_id="card-hosts",
                ),
                stat_card(
                    "GPUs",
                    str(len(gpus)),
                    health_breakdown(gpu_counts),
                    health=_headline(gpu_counts),
                    card_id="card-gpus",
                ),
                stat_card(problems.title, str(problems.total), problems.breakdown, card_id="card-problems"),
                stat_card(
                    "Jobs running",
                    str(sum(1 for j in job_rows if j.finished < j.ranks)),
                    _jobs_sub(job_rows),
                    card_id="card-jobs",
                ),
                stat_card("Breaker", problems.breaker, problems.breaker_note, card_id="card-breaker"),
                stat_card(
                    "Ingest", _ingest_value(ingest_rows, now), _ingest_sub(ingest_rows), card_id="card-ingest"
                ),
            ],
            className="cards",
        ),
        html.Div(
            [
                section(
                    "Hosts needing attention", _attention_table(hosts, now), section_id="fleet-attention"
                ),
                section("GPUs most at risk", _at_risk_table(gpus), section_id="fleet-at-risk"),
            ],
            className="two-col",
        ),
        html.Div(
            [
                section("XIDs in the last hour, by code", _xid_chart(events)),
                section("Jobs", _jobs_table(job_rows, now), section_id="fleet-jobs"),
            ],
            className="two-col",
        ),
        section(problems.title, problems.table, section_id="fleet-problems"),
    ]


def _headline(counts: Counter[Health]) -> Health | None:
    for state in (Health.FAILED, Health.SILENT, Health.DEGRADED):
        if counts.get(state):
            return state
    return Health.HEALTHY if counts else None


def _attention_table(hosts: list[HostView], now: float) -> Any:
    rows = [
        {
            "host": md_link(h.host, href("hosts", h.host)),
            "health": h.health.value,
            "reason": h.reason,
            "gpus": len(h.gpus),
            "bad_gpus": sum(1 for g in h.gpus if g.health != Health.HEALTHY),
            "last_seen": ago(now - h.last_ts),
        }
        for h in hosts
        if h.health != Health.HEALTHY
    ]
    if not rows and hosts:
        return html.Div(f"all {len(hosts)} hosts healthy", className="all-good")
    cols = [
        Col("host", "host", "link"),
        Col("health", "health", "health"),
        Col("reason", "reason", wide=True),
        Col("GPUs", "gpus", "int"),
        Col("not healthy", "bad_gpus", "int"),
        Col("last sample", "last_seen"),
    ]
    return table("fleet-hosts-table", cols, rows, page_size=10)


def _at_risk_table(gpus: list[GpuView]) -> Any:
    ranked = sorted((g for g in gpus if g.risk is not None), key=lambda g: -(g.risk or 0.0))[:TOP_AT_RISK]
    rows = [
        {
            "gpu": md_link(f"{g.state.host} / GPU {g.state.gpu_index}", href("gpus", g.state.uuid)),
            "risk": round(g.risk or 0.0, 3),
            "health": g.health.value,
            "reason": g.reason,
        }
        for g in ranked
    ]
    cols = [
        Col("GPU", "gpu", "link"),
        Col("risk", "risk", "number", 3),
        Col("health", "health", "health"),
        Col("reason", "reason", wide=True),
    ]
    return table("fleet-risk-table", cols, rows, page_size=TOP_AT_RISK)


def _xid_chart(events: list[EventCount]) -> Any:
    counts: Counter[int] = Counter()
    for e in events:
        if e.kind == "xid" and e.code is not None:
            counts[int(e.code)] += e.count
    if not counts:
        return html.Div("no XIDs in the last hour", className="all-good")
    fatal = xid_classes().fatal
    # In HTML, not a plotly figure: the page's only figure made every new tab of it load plotly.js.
    bars = [
        Bar(f"XID {c}", counts[c], COLOURS[Health.FAILED] if c in fatal else COLOURS[Health.DEGRADED])
        for c in sorted(counts)
    ]
    return bar_chart(bars, "fleet-xids")


def _jobs_table(job_rows: list[JobSummary], now: float) -> Any:
    rows = [
        {
            "job": md_link(j.job_id, href("jobs", j.job_id)),
            "state": job_state(j, now),
            "ranks": j.ranks,
            "hosts": j.hosts,
            "step": j.last_step,
            "last": ago(now - j.last_ts),
        }
        for j in job_rows
    ]
    cols = [
        Col("job", "job", "link"),
        Col("state", "state"),
        Col("ranks", "ranks", "int"),
        Col("hosts", "hosts", "int"),
        Col("step", "step", "int"),
        Col("last heartbeat", "last"),
    ]
    return table("fleet-jobs-table", cols, rows, page_size=10)


def _jobs_sub(job_rows: list[JobSummary]) -> str:
    ranks = sum(j.ranks for j in job_rows)
    return f"{ranks} ranks reporting" if job_rows else "no heartbeats in 15 min"


def _ingest_value(rows: list[TableIngest], now: float) -> str:
    gpu = next((r for r in rows if r.table == "gpu_samples"), None)
    if gpu is None or gpu.last_ts is None:
        return "no data"
    return ago(now - gpu.last_ts).replace(" ago", " lag")


def _ingest_sub(rows: list[TableIngest]) -> Any:
    return html.Div(
        [html.Div(f"{r.table}: {r.rows_in_window:,} rows / 5 min") for r in rows if r.rows_in_window],
        className="ingest-lines",
    )


PAGE = PageSpec(page_id="fleet", name="Fleet", path="/", render=render)
