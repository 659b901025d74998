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

from dashboard.figures import GRAPH_CONFIG
from dashboard.health import COLOURS, Health
from dashboard.live_slots import SlotKind, slot_id

# DataTable warns on every construction that a future Dash major version moves it out; it is in 4.x.
warnings.filterwarnings(
    "ignore", message=r"\s*The dash_table.DataTable will be removed", category=DeprecationWarning
)

Kind = Literal["text", "link", "number", "int", "health"]


def href(*parts: str) -> str:
    """A dashboard path whose segments are quoted: a host or job name never breaks out of its segment."""
    return "/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


def md_link(text: str, target: str) -> str:
    """A markdown link for a table cell; brackets and parentheses in the text are escaped."""
    escaped = "".join("\\" + c if c in "[]()\\*_`<>#" else c for c in text)
    return f"[{escaped}]({target})"


def gpu_text(uuid: str, names: Mapping[str, str]) -> str:
    """A GPU as an operator finds it in its host, with the UUID beside it: "GPU 2 · GPU-3f2…"."""
    name = names.get(uuid)
    return f"{name} · {uuid}" if name else uuid


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
            html.Div(value, className="card-value", id=slot_id(SlotKind.TEXT)),
            html.Div(sub, className="card-sub", id=slot_id(SlotKind.TEXT)),
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
    wide: bool = False  # long text (a summary, an evidence detail): most of the row's width
    # A link column whose rows hold the plain value (a host's name, a GPU's UUID): each cell links to the
    # value's page under this path (`href(link_to, value)`), made into a markdown link as the row is sent
    # (`with_links`), so the rows kept and sorted hold the plain value.
    link_to: str = ""


def table(
    table_id: str, columns: Sequence[Col], rows: Sequence[Mapping[str, Any]], page_size: int = 15
) -> html.Div:
    """A table that sorts and filters in the browser, with its headers even when it has no rows. Its rows
    are a live slot (`dashboard.live_slots`): a refresh replaces them in place, so the operator's sort,
    filter and page stay as they were. A DataTable: a new tab draws it much sooner than an AG Grid
    (BENCHMARKS.md, "Tables by size"). A table whose rows grow with the fleet is `served_table`."""
    if not rows:
        return html.Div(_headers_only(columns), id=table_id, className="table")
    return html.Div(_data_table(table_id, columns, rows, page_size), id=table_id, className="table")


def rows_id(table_id: str) -> str:
    """The DataTable of a `served_table`: its page, sort and filter are the props the server answers."""
    return f"{table_id}-rows"


def count_id(table_id: str) -> str:
    """The line under a `served_table` that says how many rows its filters keep."""
    return f"{table_id}-count"


def served_table(table_id: str, columns: Sequence[Col], round_key: str, page_size: int = 20) -> html.Div:
    """A table whose rows stay on the server (every GPU scored: 16,384 rows at 2,048 hosts): a DataTable
    with custom paging, sorting and filtering, whose page of rows, sorted and filtered on the server, is
    answered by a callback (`dashboard.served_rows`) as soon as the page is drawn and on every change of
    page, sort or filter. `round_key` names the data the rows come from; it is the table's live slot, so a
    refresh that finds a new round has the table's page asked for again, where the operator stands."""
    specs: Any = [_data_column(c) for c in columns]  # plain dicts: the generated TypedDicts add nothing
    rows = DataTable(
        id=rows_id(table_id),
        columns=specs,
        data=[],
        sort_action="custom",
        filter_action="custom",
        page_action="custom",
        page_current=0,
        page_size=page_size,
        page_count=1,
        filter_options={"case": "insensitive", "placeholder_text": "filter"},
        markdown_options={"link_target": "_self"},
        style_as_list_view=True,
        css=[{"selector": ".dash-cell-value a", "rule": "color: #1f6fd6 !important;"}],
        style_table={"overflowX": "auto"},
        style_header={"fontWeight": "600", "backgroundColor": "#f3f5f8"},
        style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "4px 8px", "textAlign": "left"},
    )
    held = dcc.Store(id=slot_id(SlotKind.BLOCKS, table_id), data=round_key)
    count = html.Div("", id=count_id(table_id), className="muted table-count")
    return html.Div([held, rows, count], id=table_id, className="table")


def _headers_only(columns: Sequence[Col]) -> list[Any]:
    """An empty table: its headers and a line saying so, in plain HTML. A DataTable with no rows costs a
    new tab as much as one with rows; rows arriving later change the page's shape, so a refresh sends it
    whole (`dashboard.live_slots`)."""
    head = html.Thead(html.Tr([html.Th(c.name) for c in columns]))
    return [html.Table(head, className="empty-table"), empty("nothing to show")]


def with_links(row: Mapping[str, Any], columns: Sequence[Col]) -> dict[str, Any]:
    """A DataTable's row: a `link_to` column's plain value as the markdown link its cell draws."""
    out = dict(row)
    for c in columns:
        value = out.get(c.id)
        if c.link_to and isinstance(value, str) and value:
            out[c.id] = md_link(value, href(c.link_to, value))
    return out


def _data_column(c: Col) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": c.name, "id": c.id}
    if c.kind == "link":
        spec["presentation"] = "markdown"
    elif c.kind in ("number", "int"):
        spec["type"] = "numeric"
        spec["format"] = Format(  # type: ignore[no-untyped-call]
            precision=0 if c.kind == "int" else c.decimals, scheme=Scheme.fixed
        )
    return spec


def _data_table(
    table_id: str, columns: Sequence[Col], rows: Sequence[Mapping[str, Any]], page_size: int
) -> DataTable:
    health_cols = [c.id for c in columns if c.kind == "health"]
    specs: Any = [_data_column(c) for c in columns]  # plain dicts: the generated TypedDicts add nothing
    data: Any = [with_links(r, columns) for r in rows]
    return DataTable(
        id=slot_id(SlotKind.TABLE, table_id),
        columns=specs,
        data=data,
        sort_action="native",
        filter_action="native",
        # Matching ignores case, so its toggle (an "Aa" drawn in a font that is not shipped) is hidden by
        # the stylesheet: there is nothing to toggle.
        filter_options={"case": "insensitive", "placeholder_text": "filter"},
        page_action="native",
        page_size=page_size,
        markdown_options={"link_target": "_self"},
        persistence=True,
        persisted_props=["sort_by", "filter_query", "page_current"],
        style_as_list_view=True,
        css=[{"selector": ".dash-cell-value a", "rule": "color: #1f6fd6 !important;"}],
        style_table={"overflowX": "auto"},
        style_header={"fontWeight": "600", "backgroundColor": "#f3f5f8"},
        style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "4px 8px", "textAlign": "left"},
        # Long text wraps within its column: read, not cut off (the other columns stay one line).
        style_cell_conditional=[
            {"if": {"column_id": c.id}, "whiteSpace": "normal", "height": "auto", "minWidth": "320px"}
            for c in columns
            if c.wide
        ],
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


def as_of(taken: float, now: float) -> html.Div:
    """When the shared fleet model a page shows was taken, and how old it is: it is built in the background
    (`dashboard.snapshot`), so it can be older than the page's own clock. A live slot: a refresh updates
    it."""
    old = f" ({ago(now - taken)})" if now - taken >= 1 else ""
    text = f"fleet health as of {when(taken)} UTC{old}"
    return html.Div(text, className="as-of muted", id=slot_id(SlotKind.TEXT, "as-of"))


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
    page_id: str,
    key: Mapping[str, str],
    body: Any,
    held: Mapping[str, Any],
    shown: Any,
    refresh_seconds: float,
    static: Any = None,
) -> html.Div:
    """A page whose body is refreshed in place every `refresh_seconds` (and by the refresh button): `held`
    is what the browser keeps of it between refreshes (`dashboard.pages.live.plan_refresh`), `shown` the
    text beside the button (when it was loaded; then when it was checked and when its data last changed)."""
    return html.Div(
        [
            dcc.Interval(id=f"{page_id}-tick", interval=int(refresh_seconds * 1000), n_intervals=0),
            dcc.Store(id=f"{page_id}-key", data=dict(key)),
            dcc.Store(id=f"{page_id}-shape", data=dict(held)),
            html.Div(
                [
                    html.Button("refresh", id=f"{page_id}-refresh", n_clicks=0, className="refresh"),
                    html.Span(shown, id=f"{page_id}-stamp", className="stamp"),
                ],
                className="page-tools",
            ),
            html.Div(body, id=f"{page_id}-body"),
            html.Div(static, id=f"{page_id}-static"),
        ],
        className="page",
    )


def graph(figure: Mapping[str, Any], graph_id: str = "") -> html.Div:
    """A Plotly figure whose traces a live refresh patches in place (zoom kept); `graph_id` names the
    wrapper for links and tests."""
    plot = dcc.Graph(id=slot_id(SlotKind.FIGURE, graph_id), figure=dict(figure), config=GRAPH_CONFIG)
    block = html.Div(plot, className="graph")
    if graph_id:
        setattr(block, "id", graph_id)  # noqa: B010
    return block
