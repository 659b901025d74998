"""How a page is registered: a layout rendered fresh per request and a callback that re-renders its body on
every refresh tick, both from the same `render(ctx, params)` function."""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import dash
from dash import Input, Output, State, html

from dashboard.components import live_page
from dashboard.context import DashboardContext, current

log = logging.getLogger(__name__)

Params = Mapping[str, str]
MAX_PARAM_CHARS: Final = 256


@dataclass(frozen=True)
class PageSpec:
    page_id: str  # also the prefix of the page's component ids
    name: str
    path: str
    render: Callable[[DashboardContext, Params], Any]
    path_template: str | None = None
    path_vars: tuple[str, ...] = ()  # from path_template; Dash hands them over still percent-encoded
    query: tuple[str, ...] = ()  # query-string keys the page reads (Dash decodes those)
    nav: bool = True
    static: Callable[[DashboardContext, Params], Any] | None = None  # drawn once, outside the refreshed body
    callbacks: Callable[[dash.Dash], None] | None = None  # the page's own callbacks (forms)


def clean_params(spec: PageSpec, given: Mapping[str, Any]) -> dict[str, str]:
    """Only the page's own parameters, as bounded text: anything else in the URL is ignored."""
    out = {}
    for name in (*spec.path_vars, *spec.query):
        value = given.get(name)
        text = value if isinstance(value, str) else ""
        if name in spec.path_vars:
            text = urllib.parse.unquote(text)
        out[name] = text[:MAX_PARAM_CHARS]
    return out


def stored_params(spec: PageSpec, key: object) -> dict[str, str]:
    """The params the layout stored in the page (already decoded), bounded again: the browser sent them."""
    given = key if isinstance(key, dict) else {}
    return {
        n: v[:MAX_PARAM_CHARS] if isinstance(v := given.get(n), str) else ""
        for n in (*spec.path_vars, *spec.query)
    }


def render_safely(spec: PageSpec, ctx: DashboardContext, params: Params) -> Any:
    """The page body, or one line saying why it could not be drawn (the traceback goes to the log only)."""
    try:
        return spec.render(ctx, params)
    except Exception as exc:
        log.exception("dashboard page %s failed", spec.page_id)
        return html.Div(f"this page could not be drawn: {type(exc).__name__}: {exc}"[:300], className="error")


def register(app: dash.Dash, spec: PageSpec) -> None:
    def layout(**kwargs: Any) -> Any:
        ctx = current()
        params = clean_params(spec, kwargs)
        static = spec.static(ctx, params) if spec.static is not None else None
        return live_page(spec.page_id, params, render_safely(spec, ctx, params), ctx.refresh_seconds, static)

    dash.register_page(  # type: ignore[no-untyped-call]
        f"dashboard.pages.{spec.page_id}",
        path=spec.path,
        path_template=spec.path_template,
        name=spec.name,
        title=f"{spec.name} · fleetguard",
        layout=layout,
    )

    @app.callback(  # type: ignore[misc]
        Output(f"{spec.page_id}-body", "children"),
        Output(f"{spec.page_id}-stamp", "children"),
        Input(f"{spec.page_id}-tick", "n_intervals"),
        Input(f"{spec.page_id}-refresh", "n_clicks"),
        State(f"{spec.page_id}-key", "data"),
        prevent_initial_call=True,
    )
    def refresh(ticks: int, clicks: int, key: Any) -> tuple[Any, Any]:
        ctx = current()
        params = stored_params(spec, key)
        body = render_safely(spec, ctx, params)
        stamp = html.Span("updated " + time.strftime("%H:%M:%S", time.gmtime(ctx.now())) + " UTC")
        # Which refresh this is: tests and the benchmark tell one redraw from the next by it.
        setattr(stamp, "data-refresh", str((ticks or 0) + (clicks or 0)))
        return body, stamp

    if spec.callbacks is not None:
        spec.callbacks(app)
