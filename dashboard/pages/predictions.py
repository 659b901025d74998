"""`/predictions`: the failure-risk ranking with the features that drive each score.

The page opens on the top of the ranking in a DataTable (sort, filter, pages), which a new tab draws with
the chunk every other page's tables use; every GPU scored (a row per GPU of the fleet) is one link away
(`?list=all`), in a DataTable whose rows stay on the server (`components.served_table`): it asks for the
page it shows, sorted and filtered there (`dashboard.served_rows`), from the round's rows built once
(`dashboard.listing_cache`)."""

from __future__ import annotations

from typing import Any, Final

import dash
from dash import dcc, html

from dashboard import figures
from dashboard.components import Col, ago, empty, graph, section, served_table, stat_card, table, when
from dashboard.context import DashboardContext
from dashboard.health import COLOURS, Health
from dashboard.listing_cache import Listing
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.predictions import Risk, drivers, latest_risks, risk_summary
from dashboard.served_rows import serve_pages

SHOWN: Final = 200
# `?list=all`: every GPU scored, bounded all the same (a fleet of 12,500 8-GPU hosts).
MAX_LISTED: Final = 100_000
ALL: Final = "all"
PAGE_ROWS: Final = 20
BINS: Final = 20


def explain(risk: Risk, top: int = 3) -> str:
    parts = []
    for d in drivers(risk.explanations)[:top]:
        parts.append(f"{d.label()} ({d.contribution:+.3f})")
    return "; ".join(parts)


TABLE_ID: Final = "predictions-table"
COLUMNS: Final = (
    Col("rank", "rank", "int"),
    Col("GPU", "gpu", "link", link_to="gpus"),
    Col("host", "host", "link", link_to="hosts"),
    Col("risk", "risk", "number", 4),
    Col("base rate", "base rate", "number", 4),
    Col("what drives it", "why"),
)
# The top's scores as ages; every GPU's as times, which stay true as long as the round is shown (its rows are
# built once per round, `dashboard.listing_cache`).
TOP_COLUMNS: Final = (*COLUMNS, Col("scored", "scored"))
ALL_COLUMNS: Final = (*COLUMNS, Col("scored (UTC)", "scored"))


def render(ctx: DashboardContext, params: Params) -> Any:
    now = ctx.now()
    every = params.get("list") == ALL
    with ctx.cursor() as cur:
        summary = risk_summary(cur, now, ctx.risk_threshold, BINS)
        risks = [] if every else latest_risks(cur, now, limit=SHOWN)
    listing = _listing(ctx, round_key(summary.newest_ts, summary.scored), now) if every else None
    listed = len(listing.rows) if listing is not None else len(risks)
    if not listed or summary.newest_ts is None:
        return empty("no risk scores in the last 3 h: live scoring is off or has not run yet")
    if listing is not None:
        models, horizon = listing.about["models"], listing.about["horizon_hours"]
        ranking = served_table(TABLE_ID, ALL_COLUMNS, listing.round_key, page_size=PAGE_ROWS)
    else:
        models, horizon = sorted({r.model_id for r in risks}), risks[0].horizon_hours
        ranking = table(TABLE_ID, TOP_COLUMNS, _top_rows(risks, now), page_size=20)
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
                stat_card("Model", models[-1] if models else "—", f"horizon {horizon:g} h"),
            ],
            className="cards",
        ),
        section(
            "Risk distribution",
            graph(_histogram(summary.histogram, ctx.risk_threshold)),
        ),
        section(
            f"Ranking ({'every GPU scored' if every else 'top'}: {listed} of {summary.scored})",
            _other_list(every, summary.scored),
            ranking,
            section_id="predictions-ranking",
        ),
    ]


def _top_rows(risks: list[Risk], now: float) -> list[dict[str, Any]]:
    return [
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


def round_key(newest_ts: float | None, scored: int) -> str:
    """The scoring round a listing of every GPU scored is of: its newest score and how many GPUs it holds
    (a GPU whose score leaves the 3 h window changes it too)."""
    return f"predictions/{newest_ts!r}/{min(scored, MAX_LISTED)}"


def _listing(ctx: DashboardContext, key: str, at: float) -> Listing:
    """Every GPU scored as of the round `key`, from the cache, or read as of `at` (a miss: a new round)."""
    return ctx.listings.listing(key, lambda: _load_listing(ctx, at))


def _load_listing(ctx: DashboardContext, at: float) -> Listing:
    with ctx.cursor() as cur:
        risks = latest_risks(cur, at, limit=MAX_LISTED)
    rows = [
        {
            "rank": i,
            "gpu": r.device_id,
            "host": r.host,
            "risk": round(r.risk, 4),
            "base rate": None if r.base_rate is None else round(r.base_rate, 4),
            "why": explain(r),
            "scored": when(r.ts),
        }
        for i, r in enumerate(risks, start=1)
    ]
    newest = max((r.ts for r in risks), default=None)
    about = {
        "models": sorted({r.model_id for r in risks}),
        "horizon_hours": risks[0].horizon_hours if risks else 0.0,
    }
    return Listing(round_key(newest, len(risks)), tuple(rows), about)


def served_listing(ctx: DashboardContext, key: str) -> Listing:
    # A block request: the round its page was drawn from, or the newest kept (read now only if none is).
    return ctx.listings.shown(key, lambda: _load_listing(ctx, ctx.now()))


def _callbacks(app: dash.Dash) -> None:
    serve_pages(app, "predictions", TABLE_ID, ALL_COLUMNS, served_listing, MAX_LISTED, PAGE_ROWS)


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
    page_id="predictions",
    name="Predictions",
    path="/predictions",
    render=render,
    query=("list",),
    callbacks=_callbacks,
)
