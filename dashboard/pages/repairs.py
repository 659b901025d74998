"""`/repairs`: the repair loop's outcomes per fault kind: how long hosts spent out of service, how often a
repair held (the fault did not come back within the escalation window), and the nodes out now."""

from __future__ import annotations

from typing import Any, Final

from dash import html

from dashboard import figures
from dashboard.components import Col, empty, graph, href, md_link, section, stat_card, table
from dashboard.context import DashboardContext
from dashboard.health import COLOURS, Health
from dashboard.pages.live import PageSpec, Params
from fleetguard.store import FaultRepairs, nodes_out, repair_summary

WINDOW_SECONDS: Final = 30 * 86400.0


def held_text(s: FaultRepairs) -> str:
    fraction = s.held_fraction
    return "—" if fraction is None else f"{fraction:.0%} ({s.held} of {s.held + s.not_held})"


def render(ctx: DashboardContext, _params: Params) -> Any:
    now = ctx.now()
    with ctx.cursor() as cur:
        summary = repair_summary(cur, now - WINDOW_SECONDS, now)
        out = nodes_out(cur, now)
    if not summary:
        return empty("no Slurm repairs in the last 30 days ([actions.slurm] drains and returns nodes)")
    held = sum(s.held for s in summary)
    decided = held + sum(s.not_held for s in summary)
    rows = [
        {
            "fault": s.fault,
            "repairs": s.repairs,
            "out_now": s.out_now,
            "resumed": s.resumed,
            "held": held_text(s),
            "selfcheck_failures": s.selfcheck_failures,
            "out_hours": round(s.out_hours, 2),
            "median_hours": round(s.median_out_hours, 2),
        }
        for s in summary
    ]
    cols = [
        Col("fault", "fault"),
        Col("repairs", "repairs", "int"),
        Col("out now", "out_now", "int"),
        Col("resumed", "resumed", "int"),
        Col("held", "held"),
        Col("self-check failures", "selfcheck_failures", "int"),
        Col("hours out", "out_hours", "number", 2),
        Col("median hours", "median_hours", "number", 2),
    ]
    out_rows = [
        {
            "node": n.node,
            "host": md_link(n.host, href("hosts", n.host)),
            "fault": n.fault,
            "incident": md_link(n.incident_id, href("incidents", n.incident_id)),
            "state": n.state.value,
            "hours": round(n.out_hours, 2),
            "why": n.detail,
        }
        for n in out
    ]
    out_cols = [
        Col("node", "node"),
        Col("host", "host", "link"),
        Col("fault", "fault"),
        Col("incident", "incident", "link"),
        Col("state", "state"),
        Col("hours out", "hours", "number", 2),
        Col("why", "why"),
    ]
    return [
        html.Div(
            [
                stat_card(
                    "Repairs", str(sum(s.repairs for s in summary)), "last 30 days", card_id="card-repairs"
                ),
                stat_card(
                    "Held",
                    "—" if not decided else f"{held / decided:.0%}",
                    f"{held} of {decided} decided",
                    health=Health.DEGRADED if decided and held < decided else Health.HEALTHY,
                    card_id="card-held",
                ),
                stat_card(
                    "Out now",
                    str(len(out)),
                    "nodes drained by fleetguard",
                    health=Health.DEGRADED if out else Health.HEALTHY,
                    card_id="card-out",
                ),
            ],
            className="cards",
        ),
        section(
            "Hours out of service per fault kind",
            graph(
                figures.bar(
                    [s.fault for s in summary],
                    [s.out_hours for s in summary],
                    COLOURS[Health.DEGRADED],
                    height=220,
                )
            ),
        ),
        section("Per fault kind", table("repairs-table", cols, rows), section_id="repairs-by-fault"),
        section(
            "Out of service now",
            table("repairs-out-table", out_cols, out_rows) if out_rows else empty("every node is back"),
            section_id="repairs-out",
        ),
    ]


PAGE = PageSpec(page_id="repairs", name="Repairs", path="/repairs", render=render)
