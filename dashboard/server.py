"""`serve_dashboard`: the Dash app served by fleetguard's own asyncio server (`fleetguard.httpserve`)
through a WSGI adapter, stopped by `close()`.

Werkzeug's threaded server held a thread per connection from its first byte: 40 clients sending one header
byte every 20 s held all of its slots and every `GET /` was refused. Here connections are read on one loop
with a deadline for the whole request head, a share per client address and per local user, and only
complete requests reach the app, on a fixed pool of worker threads."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final

from dashboard.app import create_app
from dashboard.context import context_of
from dashboard.operator import Resolver
from dashboard.queries.base import StoreReader
from dashboard.snapshot import SnapshotCache
from fleetguard.config import Config
from fleetguard.httpserve import Connection, HttpServer, Limits, bound_url
from fleetguard.jobcontrol.peer import connection_owner
from fleetguard.wsgi_adapter import wsgi_handler

WORKERS: Final = 8  # requests the app runs at once (each a few store reads); more wait on the loop
# A browser opens up to 6 connections per site and keeps them alive; a share of 128 per address leaves room
# for many tabs and the tests, while one client holding connections cannot take the 512 there are. On
# loopback one local user can use any 127.x address, so each local user (and remote address) also has a
# share, of 256.
MAX_CONNECTIONS: Final = 512
MAX_CONNECTIONS_PER_ADDRESS: Final = 128
MAX_CONNECTIONS_PER_OWNER: Final = 256
HEAD_TIMEOUT_SECONDS: Final = 10.0  # from accept to the end of the request head, however slowly it comes
DASHBOARD_LIMITS: Final = Limits(
    workers=WORKERS,
    max_connections=MAX_CONNECTIONS,
    max_connections_per_owner=MAX_CONNECTIONS_PER_OWNER,
    max_connections_per_address=MAX_CONNECTIONS_PER_ADDRESS,
    max_body_bytes=4 * 1024 * 1024,  # a callback request carries the inputs and state of a page
    head_timeout_seconds=HEAD_TIMEOUT_SECONDS,
    request_timeout_seconds=30.0,
    idle_timeout_seconds=60.0,
    # the plotly bundle is ~4.5 MB: a browser on a slow VPN link needs more than the API's 10 s to read it
    write_timeout_seconds=120.0,
)


@dataclass
class DashboardServer:
    server: HttpServer
    fleet: SnapshotCache  # the fleet model, kept fresh in the background while the server runs

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return bound_url(self.server.address, self.port)

    def wait_ready(self, timeout_seconds: float) -> bool:
        """Whether the first fleet model is built within `timeout_seconds` (the benchmark measures a
        dashboard that has been up a while, as an operator finds it)."""
        return self.fleet.wait_ready(timeout_seconds)

    def close(self) -> None:
        self.server.stop()
        self.fleet.close()


def _owner(connection: Connection) -> Hashable:
    return connection_owner(connection.peer, connection.local)


def serve_dashboard(
    store_reader: StoreReader,
    config: Config,
    *,
    port: int | None = None,
    now: Callable[[], float] | None = None,
    resolver: Resolver | None = None,
    limits: Limits = DASHBOARD_LIMITS,
) -> DashboardServer:
    """Serve the dashboard on `[dashboard] address:port` (`port` overrides; 0 = any free port). A port that
    cannot be listened on is a BindError (an OSError naming address and port). The fleet model is built in
    the background from the start and kept fresh until `close()` (`dashboard.snapshot.SnapshotCache`)."""
    app = create_app(store_reader, config, now=now, resolver=resolver)
    address = config.dashboard.address
    server = HttpServer(
        wsgi_handler(app.server),
        address,
        config.dashboard.port if port is None else port,
        limits,
        name="fleetguard-dashboard",
        owner_of=_owner,
    )
    server.start()
    # Built now, not by the first visitor: at 2,048 hosts the build is the whole of a first render's budget.
    fleet = context_of(app.server).fleet
    fleet.start()
    return DashboardServer(server, fleet)
