"""`/predictions`: the failure-risk ranking with the features that drive each score.

The page opens on the top of the ranking in a DataTable (sort, filter, pages), which a new tab draws with
the chunk every other page's tables use; every GPU scored (a row per GPU of the fleet) is one link away
(`?list=all`), in an AG Grid, whose 1.3 MB bundle and grid build cost a first render ~0.3-0.5 s more
(BENCHMARKS.md, issue 22 "session 6") and earn it only at that size."""

from __future__ import annotations

from typing import Any, Final

from dash import dcc, html

from dashboard import figures
from dashboard.components import Col, ago, empty, graph, section, stat_card, table
from dashboard.context import DashboardContext
from dashboard.health import COLOURS, Health
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.predictions import Risk, drivers, latest_risks, risk_summary

SHOWN: Final = 200
# `?list=all`: every GPU scored, bounded all the same (a fleet of 12,500 8-GPU hosts).
MAX_LISTED: Final = 100_000
ALL: Final = "all"
BINS: Final = 20


def explain(risk: Risk, top: int = 3) -> str:
    parts = []
    for d in drivers(risk.explanations)[:top]:
        parts.append(f"{d.label()} ({d.contribution:+.3f})")
    return "; ".join(parts)


def render(ctx: DashboardContext, params: Params) -> Any:
    now = ctx.now()
    every = params.get("list") == ALL
    with ctx.cursor() as cur:
        risks = latest_risks(cur, now, limit=MAX_LISTED if every else SHOWN)
        summary = risk_summary(cur, now, ctx.risk_threshold, BINS)
    if not risks or summary.newest_ts is None:
        return empty("no risk scores in the last 3 h: live scoring is off or has not run yet")
    models = sorted({r.model_id for r in risks})
    rows = [
        {
            "rank": i,
            "gpu": r.device_id,
            "host": r.host,
            "risk": round(r.risk, 4),
            "base rate": "" if r.base_rate is None else round(r.base_rate, 4),
            "why": explain(r),
            "scored": ago(now - r.ts),
        }
        for i, r in enumerate(risks, start=1)
    ]
    cols = [
        Col("rank", "rank", "int"),
        Col("GPU", "gpu", "link", link_to="gpus"),
        Col("host", "host", "link", link_to="hosts"),
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
            f"Ranking ({'every GPU scored' if every else 'top'}: {len(risks)} of {summary.scored})",
            _other_list(every, summary.scored),
            table("predictions-table", cols, rows, page_size=20, large=every),
            section_id="predictions-ranking",
        ),
    ]


def _other_list(every: bool, scored: int) -> dcc.Link:
    if every:
        return dcc.Link(f"back to the top {SHOWN}", href="/predictions", id="predictions-other-list")
    return dcc.Link(
        f"every GPU scored ({scored:,})", href=f"/predictions?list={ALL}", id="predictions-other-list"
    )


def _histogram(counts: list[int], threshold: float) -> Any:
    labels = [f"{i / BINS:.2f}" for i in range(BINS)]
    colours = [
        COLOURS[Health.DEGRADED] if (i / BINS) >= threshold else COLOURS[Health.HEALTHY] for i in range(BINS)
    ]
    return figures.bar(labels, counts, colours, height=220)


PAGE = PageSpec(
    page_id="predictions", name="Predictions", path="/predictions", render=render, query=("list",)
)
