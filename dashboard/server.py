"""`serve_dashboard`: the app on a threaded WSGI server in a background thread, stopped by `close()`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from werkzeug.serving import BaseWSGIServer, make_server

from dashboard.app import create_app
from dashboard.context import StoreReader
from dashboard.operator import Resolver
from fleetguard.config import Config

log = logging.getLogger(__name__)


@dataclass
class DashboardServer:
    server: BaseWSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.server.server_address[0])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def serve_dashboard(
    store_reader: StoreReader,
    config: Config,
    *,
    port: int | None = None,
    now: Callable[[], float] | None = None,
    resolver: Resolver | None = None,
) -> DashboardServer:
    """Serve the dashboard on `[dashboard] address:port` (`port` overrides; 0 = any free port)."""
    app = create_app(store_reader, config, now=now, resolver=resolver)
    address = config.dashboard.address
    wsgi = make_server(address, config.dashboard.port if port is None else port, app.server, threaded=True)
    # Werkzeug logs every request at INFO; the dashboard polls, so that would flood the daemon's log.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    thread = threading.Thread(target=wsgi.serve_forever, name="fleetguard-dashboard", daemon=True)
    thread.start()
    return DashboardServer(wsgi, thread)
