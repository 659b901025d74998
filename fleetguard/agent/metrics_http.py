"""The agent's /metrics endpoint on fleetguard.httpserve: the text of the last sampling round, from bytes.

A scrape never renders while holding up sampling, and fifty scrapers at once share one rendering; slow or
silent clients hold no thread (see fleetguard.httpserve). Nothing that takes more than a copy of bytes or one
system call runs on the server's loop thread, which every connection waits behind: while someone scrapes,
each round's text is rendered on the worker as the round completes, and a scrape that comes before it is
ready waits for it on the worker; who holds a new connection is asked of the kernel for that one socket
(netlink), without blocking, on the loop."""

from __future__ import annotations

from collections.abc import Hashable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fleetguard.agent.metrics import MetricsState
from fleetguard.httpserve import (
    LOOKUP_BLOCKS,
    Connection,
    Handler,
    HttpError,
    HttpServer,
    Limits,
    QuickHandler,
    Request,
    Response,
)
from fleetguard.jobcontrol.peer import connection_owner, connection_owner_now

METRICS_PATH = "/metrics"

# Scrapes carry no body and are answered on the loop thread from bytes (see serve_metrics); the one worker
# renders the text, ahead of the scrapes or for one that came before it was ready. Prometheus keeps one
# connection per target, so a share of 64 per owner (a local uid, or a remote address) leaves room for every
# real scraper while one local user or network peer holding connections cannot take all 1024.
METRICS_LIMITS = Limits(workers=1, max_body_bytes=4096, max_connections=1024, max_connections_per_owner=64)


def metrics_handler(state: MetricsState) -> Handler:
    def handle(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            raise HttpError(405, f"{request.method} is not served here; GET {METRICS_PATH}")
        if request.path == METRICS_PATH:
            return Response(200, state.exposition(), CONTENT_TYPE_LATEST)
        if request.path == "/":
            return Response.text(200, f"fleetguard agent: metrics at {METRICS_PATH}\n")
        raise HttpError(404, f"unknown path {request.path}; metrics are at {METRICS_PATH}")

    return handle


def quick_metrics_handler(state: MetricsState, handler: Handler) -> QuickHandler:
    """`handler` on the loop thread where it answers at once: /metrics from text already rendered (None,
    so a worker renders it, when it is not), every other path as `handler` does (no rendering there)."""

    def quick(request: Request) -> Response | None:
        if request.path == METRICS_PATH and request.method in ("GET", "HEAD"):
            text = state.rendered_now()
            return None if text is None else Response(200, text, CONTENT_TYPE_LATEST)
        return handler(request)

    return quick


def _owner(connection: Connection) -> Hashable:
    return connection_owner(connection.peer, connection.local)


def _owner_now(connection: Connection) -> Hashable:
    owner = connection_owner_now(connection.peer, connection.local)
    return LOOKUP_BLOCKS if owner is None else owner


def serve_metrics(
    state: MetricsState, address: str, port: int, limits: Limits = METRICS_LIMITS
) -> HttpServer:
    """Serve `state` on http://address:port/metrics (started); `.stop()` it. BindError (an OSError whose
    message names address and port) if it cannot listen there."""
    handler = metrics_handler(state)
    server = HttpServer(
        handler,
        address,
        port,
        limits,
        name="fleetguard-metrics",
        quick=quick_metrics_handler(state, handler),
        owner_of=_owner,
        owner_now=_owner_now,
    )

    def render_ahead() -> None:
        if state.wants_rendering() and not server.submit(lambda: state.exposition(scrape=False)):
            state.on_round.remove(render_ahead)  # the server has stopped

    state.on_round.append(render_ahead)
    try:
        server.start()
    except BaseException:
        state.on_round.remove(render_ahead)
        raise
    return server
