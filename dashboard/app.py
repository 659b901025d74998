"""`create_app`: the Dash app over a store, every page registered, no debug tools, loopback by default."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from html import escape as html_escape
from pathlib import Path
from typing import Any, Final

import dash
import flask
from dash import dcc, html

from dashboard.auth import read_operator_token
from dashboard.context import DashboardContext, install
from dashboard.listing_cache import ListingCache
from dashboard.operator import OperatorDesk, Resolver
from dashboard.pages import alerts, fleet, gpu, host, incidents, jobs, network, policy, predictions, repairs
from dashboard.pages.live import PageSpec, register
from dashboard.plotly_bundle import serve_partial_bundle, url_script
from dashboard.polyfill_shim import replace_polyfill, serve_runtime_shim
from dashboard.queries.base import StoreReader
from dashboard.router import app_layout, head_script, register_router, title_of
from dashboard.snapshot import FleetModel, SnapshotCache, build_fleet_model
from dashboard.static_cache import serve_versioned, versioned_tags
from fleetguard.config import Config

ASSETS: Final = Path(__file__).parent / "assets"
# Navigation order; pages with path variables are reached by links only.
PAGES: Final[tuple[PageSpec, ...]] = (
    fleet.PAGE,
    network.PAGE,
    jobs.LIST_PAGE,
    incidents.LIST_PAGE,
    predictions.PAGE,
    repairs.PAGE,
    alerts.PAGE,
    policy.PAGE,
    host.PAGE,
    gpu.PAGE,
    jobs.JOB_PAGE,
    incidents.INCIDENT_PAGE,
)

_SECURITY_HEADERS: Final = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(
    store_reader: StoreReader,
    config: Config,
    *,
    now: Callable[[], float] | None = None,
    resolver: Resolver | None = None,
) -> dash.Dash:
    """The dashboard over `store_reader` (anything with `cursor()`: the store of `up` or the controller).

    `now` is the clock pages measure ages against (default: wall clock); tests pass the store's end time.
    `resolver` resolves an incident in the process's incident engine (IncidentService.resolve); without it
    the dashboard acknowledges and silences but refuses to resolve. Operator actions are written through
    `store_reader`'s cursors, so it must be the writing store for them to be recorded.
    """
    clock = now or time.time
    token = read_operator_token(config.dashboard.operator_token_file)
    threshold = config.predictor.risk_threshold

    def build() -> FleetModel:
        cur = store_reader.cursor()
        try:
            return build_fleet_model(cur, clock(), threshold, config.controller.silent_after_seconds)
        finally:
            cur.close()

    ctx = DashboardContext(
        reader=store_reader,
        now=clock,
        refresh_seconds=config.dashboard.refresh_seconds,
        risk_threshold=threshold,
        config=config,
        fleet=SnapshotCache(build, config.dashboard.refresh_seconds),
        desk=OperatorDesk(store_reader, token, resolver, clock),
        listings=ListingCache(),
    )
    server = flask.Flask("fleetguard.dashboard")
    install(server, ctx)
    server.after_request(_secure)
    app = dash.Dash(
        "fleetguard.dashboard",
        server=server,  # type: ignore[arg-type]
        assets_folder=str(ASSETS),
        title="fleetguard",
        # None: the tab title never flickers to "Updating..." on a live refresh.
        update_title=None,  # type: ignore[arg-type]
        suppress_callback_exceptions=True,  # each page's components exist only while it is shown
        serve_locally=True,  # no CDN: the dashboard works on an air-gapped cluster
    )
    _index_parts(app, serve_runtime_shim(server, app.config.requests_pathname_prefix))
    serve_partial_bundle(server, app.config.requests_pathname_prefix)
    serve_versioned(app)
    for spec in PAGES:
        register(app, spec)
    register_router(app, PAGES)
    app.layout = app_layout(PAGES, _header)
    return app


def _index_parts(app: dash.Dash, runtime_tag: str | None) -> None:
    """Every page's HTML: its page's title, the router's head script (`dashboard.router`) and the
    regenerator runtime instead of the whole Babel polyfill (`dashboard.polyfill_shim`)."""
    interpolate: Callable[..., str] = app.interpolate_index
    prefix = app.config.requests_pathname_prefix
    script = head_script(prefix) + url_script(prefix)

    def with_parts(**parts: Any) -> str:
        path = urllib.parse.quote(flask.request.path.removeprefix(prefix.rstrip("/"))) or "/"
        return interpolate(
            **{
                **parts,
                "title": html_escape(title_of(PAGES, path)),
                "css": script + parts["css"],
                "scripts": replace_polyfill(versioned_tags(parts["scripts"]), runtime_tag),
            }
        )

    setattr(app, "interpolate_index", with_parts)  # noqa: B010  (Dash calls self.interpolate_index)


def _secure(response: flask.Response) -> flask.Response:
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if flask.request.path.endswith("/_dash-layout"):
        response.headers["Cache-Control"] = "no-store"  # drawn for the page its request names, at that moment
    return response


def _header() -> html.Header:
    links = [dcc.Link(spec.name, href=spec.path, className="nav-link") for spec in PAGES if spec.nav]
    return html.Header(
        [dcc.Link("fleetguard", href="/", className="brand"), html.Nav(links, className="nav")],
        className="header",
    )
