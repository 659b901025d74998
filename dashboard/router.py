"""The app's layout with the asked-for page already in it, fetched while the page's scripts still load.

Through Dash's pages a first render was four steps in a row: the HTML; every script run (~0.2 s); the app's
layout (an empty page container); then a callback drawing the page (its queries, then its components). Here:

- the HTML carries a small script (`PREFETCH`, first in its head) that asks for the layout and the callback
  list at once, naming the page it was opened on (`PAGE_HEADER`); Dash's renderer, once its scripts have
  run, is handed those answers instead of asking again;
- the layout is a function (`app_layout`): with that header, the page is drawn into it, so the server's
  work overlaps the browser's script loading and no callback is needed to show the page;
- navigation inside the app (links, back) draws the new page in one callback (`_navigate`), gated by a
  clientside callback (`GATE`) that skips the first call when the layout already holds the page.

Without the header (a renderer that asked by itself) the layout has no page in it and the gate asks for
it, as Dash's pages did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

import dash
import flask
from dash import ClientsideFunction, Input, Output, State, dcc, html

from dashboard.context import DashboardContext, current
from dashboard.pages.live import PageSpec, clean_params, page_layout
from dashboard.routes import MAX_PATH_CHARS, route

PAGE_HEADER: Final = "X-Fleetguard-Page"
LOCATION_ID: Final = "fg-location"
CONTENT_ID: Final = "fg-page"
SERVED_ID: Final = "fg-served"  # the path the layout's page was drawn for (None: none drawn)
WANTED_ID: Final = "fg-wanted"  # the path the gate asks the server to draw
TITLE_ID: Final = "fg-title"
APP_TITLE: Final = "fleetguard"

# Runs first in the page's head: the layout (for this tab's path) and the callback list are requested
# before the ~1 MB of scripts after it are run; the renderer's own requests for them take these answers
# (each once). A later request for the layout (a retry) still names the page.
PREFETCH: Final = """(function () {
  var base = %(base)s, header = %(header)s, early = {};
  var plain = window.fetch.bind(window);
  function here() { return window.location.pathname + window.location.search; }
  function ask(part, named) {
    var headers = {Accept: 'application/json'};
    if (named) headers[header] = here();
    return plain(base + part, {method: 'GET', credentials: 'same-origin', headers: headers});
  }
  early[base + '_dash-layout'] = ask('_dash-layout', true);
  early[base + '_dash-dependencies'] = ask('_dash-dependencies', false);
  window.fetch = function (input, init) {
    var url = typeof input === 'string' ? input : (input && input.url);
    var get = !init || !init.method || init.method === 'GET';
    if (get && early[url]) {
      var answer = early[url];
      delete early[url];
      return answer;
    }
    if (get && url === base + '_dash-layout') {
      var headers = new Headers((init && init.headers) || {});
      headers.set(header, here());
      init = Object.assign({}, init, {headers: headers});
    }
    return plain(input, init);
  };
})();"""

# On the location's first value, nothing to draw when the layout came with the page for it; otherwise
# (a layout without the page, then every navigation) the path to draw. `served` is cleared after the first
# call, so coming back to that path later draws it again.
GATE: Final = "fgRoute"
# The tab's title follows navigation inside the app (the first one is in the HTML).
TITLE: Final = "fgTitle"


def title_of(specs: Sequence[PageSpec], pathname: str, search: str = "") -> str:
    found = route(specs, pathname, search)
    return f"{found.spec.name} · {APP_TITLE}" if found else f"not found · {APP_TITLE}"


def draw(specs: Sequence[PageSpec], ctx: DashboardContext, wanted: str) -> tuple[Any, str]:
    """The page at `wanted` (a browser path with its query) and its title, or a line saying none is there."""
    pathname, _, query = wanted.partition("?")
    found = route(specs, pathname, "?" + query if query else "")
    if found is None:
        return html.Div(f"no page at {wanted[:200]}", className="error"), f"not found · {APP_TITLE}"
    params = clean_params(found.spec, found.given)
    return page_layout(found.spec, ctx, params), f"{found.spec.name} · {APP_TITLE}"


def app_layout(specs: Sequence[PageSpec], header: Callable[[], Any]) -> Callable[[], Any]:
    """The layout function: the app's frame, with the page the request names (`PAGE_HEADER`) drawn in."""

    def layout() -> Any:
        wanted = flask.request.headers.get(PAGE_HEADER) if flask.has_request_context() else None
        content: Any = None
        if wanted is not None and len(wanted) <= MAX_PATH_CHARS:
            content, _title = draw(specs, current(), wanted)
        else:
            wanted = None
        frame = [
            dcc.Location(id=LOCATION_ID, refresh="callback-nav"),
            dcc.Store(id=SERVED_ID, data=wanted),
            dcc.Store(id=WANTED_ID),
            html.Div(id=TITLE_ID, hidden=True),
            html.Div(content, id=CONTENT_ID),
        ]
        return html.Div([header(), html.Main(frame, className="main")])

    return layout


def register_router(app: dash.Dash, specs: Sequence[PageSpec]) -> None:
    """Navigation's callbacks (the gate, the page's drawing, the title) and the head script."""
    app.clientside_callback(  # type: ignore[no-untyped-call]
        ClientsideFunction("fleetguard", GATE),
        Output(WANTED_ID, "data"),
        Output(SERVED_ID, "data"),
        Input(LOCATION_ID, "pathname"),
        Input(LOCATION_ID, "search"),
        State(SERVED_ID, "data"),
        # Fired by the location once it has read the tab's address (its first value), as Dash's pages were:
        # before that its pathname is empty.
        prevent_initial_call=True,
    )

    @app.callback(  # type: ignore[misc]
        Output(CONTENT_ID, "children"),
        Output(TITLE_ID, "children"),
        Input(WANTED_ID, "data"),
        prevent_initial_call=True,
    )
    def _navigate(wanted: Any) -> tuple[Any, str]:
        text = wanted if isinstance(wanted, str) else "/"
        return draw(specs, current(), text[:MAX_PATH_CHARS])

    app.clientside_callback(  # type: ignore[no-untyped-call]
        ClientsideFunction("fleetguard", TITLE),
        Output(TITLE_ID, "title"),
        Input(TITLE_ID, "children"),
        prevent_initial_call=True,
    )


def head_script(prefix: str) -> str:
    """`PREFETCH` as an inline script tag for the app under `prefix` (Dash's requests_pathname_prefix)."""
    # json.dumps of a str is a JS string literal; "</" is escaped so the text can never end the tag.
    literal = PREFETCH % {"base": json.dumps(prefix), "header": json.dumps(PAGE_HEADER)}
    return "<script>" + literal.replace("</", "<\\/") + "</script>"
