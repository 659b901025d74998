"""Layout pieces every page uses: health badges, stat cards, sortable tables, sections, time formatting."""

from __future__ import annotations

import datetime as dt
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dash import dcc, html
from dash.dash_table.DataTable import DataTable
from dash.dash_table.Format import Format, Scheme

from dashboard.health import COLOURS, Health

Kind = Literal["text", "link", "number", "int", "health"]

# DataTable warns on every construction that a future Dash major version moves it out; it is in 4.x.
warnings.filterwarnings(
    "ignore", message=r"\s*The dash_table.DataTable will be removed", category=DeprecationWarning
)


def href(*parts: str) -> str:
    """A dashboard path whose segments are quoted: a host or job name never breaks out of its segment."""
    return "/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


def md_link(text: str, target: str) -> str:
    """A markdown link for a table cell; brackets and parentheses in the text are escaped."""
    escaped = "".join("\\" + c if c in "[]()\\*_`<>#" else c for c in text)
    return f"[{escaped}]({target})"


def badge(health: Health | str) -> html.Span:
    state = Health(health)
    return html.Span(state.value, className=f"badge health-{state.value}")


def stat_card(
    title: str, value: str, sub: Any = "", *, health: Health | None = None, card_id: str = ""
) -> html.Div:
    cls = "card" + (f" card-{health.value}" if health is not None else "")
    card = html.Div(
        [
            html.Div(title, className="card-title"),
            html.Div(value, className="card-value"),
            html.Div(sub, className="card-sub"),
        ],
        className=cls,
    )
    if card_id:
        setattr(card, "id", card_id)  # noqa: B010  (Dash's generated stubs declare no `id` attribute)
    return card


def health_breakdown(counts: Mapping[Health, int]) -> html.Div:
    """ "3 failed · 1 degraded ..." as coloured chips, worst first, zero states left out."""
    chips = [
        html.Span(f"{counts[h]} {h.value}", className=f"chip health-{h.value}")
        for h in (Health.FAILED, Health.SILENT, Health.DEGRADED, Health.HEALTHY)
        if counts.get(h, 0)
    ]
    return html.Div(chips or [html.Span("none", className="muted")], className="chips")


def section(title: str, *children: Any, section_id: str = "") -> html.Section:
    # A child that is a list is spliced in: Dash would hand a nested list to React as a raw object.
    flat = [c for child in children for c in (child if isinstance(child, list) else [child])]
    block = html.Section([html.H2(title), *flat], className="section")
    if section_id:
        setattr(block, "id", section_id)  # noqa: B010
    return block


def empty(text: str) -> html.Div:
    return html.Div(text, className="empty")


@dataclass(frozen=True)
class Col:
    name: str
    id: str
    kind: Kind = "text"
    decimals: int = 1


def _column_spec(c: Col) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": c.name, "id": c.id}
    if c.kind == "link":
        spec["presentation"] = "markdown"
    elif c.kind in ("number", "int"):
        spec["type"] = "numeric"
        spec["format"] = Format(  # type: ignore[no-untyped-call]
            precision=0 if c.kind == "int" else c.decimals, scheme=Scheme.fixed
        )
    return spec


def table(
    table_id: str, columns: Sequence[Col], rows: Sequence[Mapping[str, Any]], page_size: int = 15
) -> Any:
    """A table that sorts and filters in the browser and keeps the operator's sort and filter across live
    refreshes (persistence: the refreshed table has the same id)."""
    if not rows:
        return empty("nothing to show")
    health_cols = [c.id for c in columns if c.kind == "health"]
    # Plain dicts; DataTable's generated TypedDicts add nothing over them here.
    specs: Any = [_column_spec(c) for c in columns]
    data: Any = [dict(r) for r in rows]
    return DataTable(
        id=table_id,
        columns=specs,
        data=data,
        sort_action="native",
        filter_action="native",
        page_action="native",
        page_size=page_size,
        markdown_options={"link_target": "_self"},
        persistence=True,
        persisted_props=["sort_by", "filter_query", "page_current"],
        style_as_list_view=True,
        # The table's own stylesheet: its markdown links would otherwise keep DataTable's pink.
        css=[{"selector": ".dash-cell-value a", "rule": "color: #1f6fd6 !important;"}],
        style_table={"overflowX": "auto"},
        style_header={"fontWeight": "600", "backgroundColor": "#f3f5f8"},
        style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "4px 8px", "textAlign": "left"},
        style_data_conditional=[
            {
                "if": {"filter_query": f'{{{col}}} = "{h.value}"', "column_id": col},
                "color": "white",
                "backgroundColor": colour,
                "fontWeight": "600",
            }
            for col in health_cols
            for h, colour in COLOURS.items()
        ],
    )


def when(ts: float | None) -> str:
    """UTC time of day (with the date when not today's) for a table cell or a label."""
    if ts is None:
        return "—"
    moment = dt.datetime.fromtimestamp(ts, dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def ago(seconds: float) -> str:
    if seconds < 0:
        seconds = 0
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} d ago"


def gib(n_bytes: int) -> float:
    return n_bytes / 2**30


def live_page(
    page_id: str, key: Mapping[str, str], body: Any, refresh_seconds: float, static: Any = None
) -> html.Div:
    """A page whose body re-renders every refresh (and on the refresh button) without reloading."""
    return html.Div(
        [
            dcc.Interval(id=f"{page_id}-tick", interval=int(refresh_seconds * 1000), n_intervals=0),
            dcc.Store(id=f"{page_id}-key", data=dict(key)),
            html.Div(
                [
                    html.Button("refresh", id=f"{page_id}-refresh", n_clicks=0, className="refresh"),
                    html.Span("", id=f"{page_id}-stamp", className="stamp"),
                ],
                className="page-tools",
            ),
            html.Div(body, id=f"{page_id}-body"),
            html.Div(static, id=f"{page_id}-static"),
        ],
        className="page",
    )
