"""`/predictions`: the failure-risk ranking with the features that drive each score."""

from __future__ import annotations

from typing import Any, Final

from dash import dcc, html

from dashboard import figures
from dashboard.components import Col, ago, empty, href, md_link, section, stat_card, table
from dashboard.context import DashboardContext
from dashboard.figures import GRAPH_CONFIG
from dashboard.health import COLOURS, Health
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.predictions import Risk, drivers, latest_risks

SHOWN: Final = 200
BINS: Final = 20


def explain(risk: Risk, top: int = 3) -> str:
    parts = []
    for d in drivers(risk.explanations)[:top]:
        value = "" if d.value is None else f"={d.value:g}"
        parts.append(f"{d.feature}{value} ({d.contribution:+.3f})")
    return "; ".join(parts)


def render(ctx: DashboardContext, _params: Params) -> Any:
    now = ctx.now()
    with ctx.cursor() as cur:
        risks = latest_risks(cur, now)
    if not risks:
        return empty("no risk scores in the last 3 h: live scoring is off or has not run yet")
    above = [r for r in risks if r.risk >= ctx.risk_threshold]
    newest = max(r.ts for r in risks)
    models = sorted({r.model_id for r in risks})
    rows = [
        {
            "rank": i,
            "gpu": md_link(r.device_id, href("gpus", r.device_id)),
            "host": md_link(r.host, href("hosts", r.host)),
            "risk": round(r.risk, 4),
            "why": explain(r),
            "scored": ago(now - r.ts),
        }
        for i, r in enumerate(risks[:SHOWN], start=1)
    ]
    cols = [
        Col("rank", "rank", "int"),
        Col("GPU", "gpu", "link"),
        Col("host", "host", "link"),
        Col("risk", "risk", "number", 4),
        Col("what drives it", "why"),
        Col("scored", "scored"),
    ]
    return [
        html.Div(
            [
                stat_card(
                    "GPUs scored", str(len(risks)), f"newest round {ago(now - newest)}", card_id="card-scored"
                ),
                stat_card(
                    "At risk",
                    str(len(above)),
                    f"risk >= {ctx.risk_threshold:g}",
                    health=Health.DEGRADED if above else Health.HEALTHY,
                    card_id="card-at-risk",
                ),
                stat_card("Model", models[-1] if models else "—", f"horizon {risks[0].horizon_hours:g} h"),
            ],
            className="cards",
        ),
        section(
            "Risk distribution", dcc.Graph(figure=_histogram(risks, ctx.risk_threshold), config=GRAPH_CONFIG)
        ),
        section(
            f"Ranking (top {min(SHOWN, len(risks))})",
            table("predictions-table", cols, rows, page_size=20),
            section_id="predictions-ranking",
        ),
    ]


def _histogram(risks: list[Risk], threshold: float) -> Any:
    counts = [0] * BINS
    for r in risks:
        counts[min(BINS - 1, max(0, int(r.risk * BINS)))] += 1
    labels = [f"{i / BINS:.2f}" for i in range(BINS)]
    colours = [
        COLOURS[Health.DEGRADED] if (i / BINS) >= threshold else COLOURS[Health.HEALTHY] for i in range(BINS)
    ]
    return figures.bar(labels, counts, colours, height=220)


PAGE = PageSpec(page_id="predictions", name="Predictions", path="/predictions", render=render)
