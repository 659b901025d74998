"""`/network`: IB / RoCE ports by state, rate and error rates, link flaps over time, the worst ports.

Both charts are drawn in HTML (`dashboard.column_chart`, `dashboard.bar_chart`), so the page never loads
plotly.js: its script and two figures' layout were ~0.25 s of a ~0.5 s first render (BENCHMARKS.md,
issue 22 session 10)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from dash import html

from dashboard.bar_chart import Bar, bar_chart
from dashboard.column_chart import bucket_starts, column_chart
from dashboard.components import Col, as_of, health_breakdown, href, md_link, section, stat_card, table
from dashboard.context import DashboardContext
from dashboard.fleet_view import PortView
from dashboard.health import COLOURS, Health
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.network import link_flaps
from dashboard.snapshot import FAULT_WINDOW_SECONDS

ERROR_WINDOW_SECONDS: Final = FAULT_WINDOW_SECONDS  # the window of the fleet model's counters
FLAP_HISTORY_SECONDS: Final = 86400.0
FLAP_BUCKET_SECONDS: Final = 900.0
WORST_PORTS: Final = 20
# A table row per port of a 2,048-host fleet would ship 16,384 rows to the browser on every refresh.
MAX_TABLE_PORTS: Final = 500


def render(ctx: DashboardContext, _params: Params) -> Any:
    model = ctx.fleet.get()
    now, ports = model.now, model.ports
    with ctx.cursor() as cur:
        flaps = link_flaps(cur, now - FLAP_HISTORY_SECONDS, now, FLAP_BUCKET_SECONDS)
    states = Counter(p.state.state or "unknown" for p in ports)
    rates = Counter(f"{p.state.rate_gbps:g} Gb/s" if p.state.rate_gbps else "unknown" for p in ports)
    errors = sum(p.counters.errors for p in ports if p.counters)
    flapped = sum(p.counters.link_downed for p in ports if p.counters)
    return [
        as_of(model.now, ctx.now()),
        html.Div(
            [
                stat_card(
                    "Ports",
                    str(len(ports)),
                    health_breakdown(Counter(p.health for p in ports)),
                    card_id="card-ports",
                ),
                stat_card(
                    "State",
                    ", ".join(f"{n} {s}" for s, n in states.most_common()) or "—",
                    "from the newest sample",
                ),
                stat_card(
                    "Rate",
                    ", ".join(f"{n} at {r}" for r, n in rates.most_common()) or "—",
                    "negotiated link rate",
                ),
                stat_card(
                    "Errors (1 h)",
                    f"{errors:,}",
                    "symbol, receive, integrity, transport …",
                    card_id="card-port-errors",
                ),
                stat_card("Link flaps (1 h)", str(flapped), "link_downed increments", card_id="card-flaps"),
            ],
            className="cards",
        ),
        html.Div(
            [
                section("Link-down events (24 h)", _flap_chart(flaps, now)),
                section("Worst ports (1 h)", _worst_chart(ports)),
            ],
            className="two-col",
        ),
        section(
            "Ports that are not healthy",
            _ports_table("network-bad-table", [p for p in ports if p.health != Health.HEALTHY]),
            section_id="network-bad",
        ),
        section(
            f"All ports (the worst {MAX_TABLE_PORTS} of {len(ports)})"
            if len(ports) > MAX_TABLE_PORTS
            else "All ports",
            _ports_table("network-ports-table", ports),
        ),
    ]


def _score(p: PortView) -> int:
    """Worst first: a flap outweighs any number of symbol errors."""
    if p.counters is None:
        return 0
    return p.counters.link_downed * 1_000_000 + p.counters.errors


def _worst_chart(ports: list[PortView]) -> Any:
    worst = [p for p in sorted(ports, key=_score, reverse=True)[:WORST_PORTS] if _score(p) > 0]
    if not worst:
        return html.Div("no port errors or flaps in the last hour", className="all-good")
    bars = [
        Bar(
            f"{p.state.host} {p.state.device}/{p.state.port}",
            p.counters.errors + p.counters.link_downed if p.counters else 0,
            COLOURS[p.health],
        )
        for p in worst
    ]
    return bar_chart(bars, "network-worst-ports")


def _flap_chart(flaps: list[tuple[float, int, int]], now: float) -> Any:
    if not flaps:
        return html.Div("no link went down in the last 24 h", className="all-good")
    # Keyed by the bucket each start falls in: the query's buckets and the chart's are the same multiples.
    counts: dict[float, float] = {}
    for start, events, _hosts in flaps:
        key = float(int(start // FLAP_BUCKET_SECONDS) * FLAP_BUCKET_SECONDS)
        counts[key] = counts.get(key, 0.0) + events
    return column_chart(
        counts,
        bucket_starts(now - FLAP_HISTORY_SECONDS, now, FLAP_BUCKET_SECONDS),
        FLAP_BUCKET_SECONDS,
        "network-flaps",
        colour=COLOURS[Health.FAILED],
        what="link-down events",
    )


def _ports_table(table_id: str, ports: list[PortView]) -> Any:
    rows = [
        {
            "host": md_link(p.state.host, href("hosts", p.state.host)),
            "port": f"{p.state.device}/{p.state.port}",
            "health": p.health.value,
            "reason": p.reason,
            "state": p.state.state or "?",
            "phys": p.state.phys_state or "?",
            "rate": p.state.rate_gbps,
            "layer": p.state.link_layer or "?",
            "errors": p.counters.errors if p.counters else 0,
            "errors_per_min": round(
                (p.counters.errors if p.counters else 0) / (ERROR_WINDOW_SECONDS / 60), 2
            ),
            "flaps": p.counters.link_downed if p.counters else 0,
            "tx": round((p.counters.tx_bytes_per_second if p.counters else 0.0) / 1e9, 2),
            "rx": round((p.counters.rx_bytes_per_second if p.counters else 0.0) / 1e9, 2),
        }
        for p in sorted(ports, key=lambda p: (p.health == Health.HEALTHY, -_score(p)))[:MAX_TABLE_PORTS]
    ]
    cols = [
        Col("host", "host", "link"),
        Col("port", "port"),
        Col("health", "health", "health"),
        Col("reason", "reason", wide=True),
        Col("state", "state"),
        Col("physical", "phys"),
        Col("rate Gb/s", "rate", "number", 0),
        Col("layer", "layer"),
        Col("errors 1 h", "errors", "int"),
        Col("errors / min", "errors_per_min", "number", 2),
        Col("flaps 1 h", "flaps", "int"),
        Col("tx GB/s", "tx", "number", 2),
        Col("rx GB/s", "rx", "number", 2),
    ]
    return table(table_id, cols, rows, page_size=15)


PAGE = PageSpec(page_id="network", name="Network", path="/network", render=render)
