"""`/predictions`: the failure-risk ranking with the features that drive each score."""

from __future__ import annotations

from typing import Any, Final

from dash import html

from dashboard import figures
from dashboard.components import Col, ago, empty, graph, href, md_link, section, stat_card, table
from dashboard.context import DashboardContext
from dashboard.health import COLOURS, Health
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.predictions import Risk, drivers, latest_risks, risk_summary

SHOWN: Final = 200
BINS: Final = 20


def explain(risk: Risk, top: int = 3) -> str:
    parts = []
    for d in drivers(risk.explanations)[:top]:
        parts.append(f"{d.label()} ({d.contribution:+.3f})")
    return "; ".join(parts)


def render(ctx: DashboardContext, _params: Params) -> Any:
    now = ctx.now()
    with ctx.cursor() as cur:
        risks = latest_risks(cur, now, limit=SHOWN)
        summary = risk_summary(cur, now, ctx.risk_threshold, BINS)
    if not risks or summary.newest_ts is None:
        return empty("no risk scores in the last 3 h: live scoring is off or has not run yet")
    models = sorted({r.model_id for r in risks})
    rows = [
        {
            "rank": i,
            "gpu": md_link(r.device_id, href("gpus", r.device_id)),
            "host": md_link(r.host, href("hosts", r.host)),
            "risk": round(r.risk, 4),
            "base rate": "" if r.base_rate is None else round(r.base_rate, 4),
            "why": explain(r),
            "scored": ago(now - r.ts),
        }
        for i, r in enumerate(risks, start=1)
    ]
    cols = [
        Col("rank", "rank", "int"),
        Col("GPU", "gpu", "link"),
        Col("host", "host", "link"),
        Col("risk", "risk", "number", 4),
        Col("base rate", "base rate", "number", 4),
        Col("what drives it", "why"),
        Col("scored", "scored"),
    ]
    return [
        html.Div(
            [
                stat_card(
                    "GPUs scored",
                    str(summary.scored),
                    f"newest round {ago(now - summary.newest_ts)}",
                    card_id="card-scored",
                ),
                stat_card(
                    "At risk",
                    str(summary.above),
                    f"risk >= {ctx.risk_threshold:g}",
                    health=Health.DEGRADED if summary.above else Health.HEALTHY,
                    card_id="card-at-risk",
                ),
                stat_card("Model", models[-1] if models else "—", f"horizon {risks[0].horizon_hours:g} h"),
            ],
            className="cards",
        ),
        section(
            "Risk distribution",
            graph(_histogram(summary.histogram, ctx.risk_threshold)),
        ),
        section(
            f"Ranking (top {len(risks)} of {summary.scored})",
            table("predictions-table", cols, rows, page_size=20, large=True),
            section_id="predictions-ranking",
        ),
    ]


def _histogram(counts: list[int], threshold: float) -> Any:
    labels = [f"{i / BINS:.2f}" for i in range(BINS)]
    colours = [
        COLOURS[Health.DEGRADED] if (i / BINS) >= threshold else COLOURS[Health.HEALTHY] for i in range(BINS)
    ]
    return figures.bar(labels, counts, colours, height=220)


PAGE = PageSpec(page_id="predictions", name="Predictions", path="/predictions", render=render)
