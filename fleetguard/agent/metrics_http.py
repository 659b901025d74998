"""The agent's /metrics endpoint on fleetguard.httpserve: the text of the last sampling round, from bytes.

A scrape never renders while holding up sampling, and fifty scrapers at once share one rendering; slow or
silent clients hold no thread (see fleetguard.httpserve)."""

from __future__ import annotations

from collections.abc import Hashable

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fleetguard.agent.metrics import MetricsState
from fleetguard.httpserve import Connection, Handler, HttpError, HttpServer, Limits, Request, Response
from fleetguard.jobcontrol.peer import connection_owner

METRICS_PATH = "/metrics"

# Scrapes carry no body; the handler runs on the loop thread (see serve_metrics), so the one worker only
# looks up who holds a new connection. Prometheus keeps one connection per target, so a share of 64 per
# owner (a local uid, or a remote address) leaves room for every real scraper while one local user or
# network peer holding connections cannot take all 1024.
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


def _owner(connection: Connection) -> Hashable:
    return connection_owner(connection.peer, connection.local)


def serve_metrics(
    state: MetricsState, address: str, port: int, limits: Limits = METRICS_LIMITS
) -> HttpServer:
    """Serve `state` on http://address:port/metrics (started); `.stop()` it. BindError (an OSError whose
    message names address and port) if it cannot listen there."""
    # Inline: an answer is a copy of bytes rendered at most once per round (that rendering, a few ms, is the
    # only work done on the loop thread), so no worker thread is needed.
    server = HttpServer(
        metrics_handler(state),
        address,
        port,
        limits,
        name="fleetguard-metrics",
        inline=True,
        owner_of=_owner,
    )
    server.start()
    return server
