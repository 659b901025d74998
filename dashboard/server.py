"""`serve_dashboard`: the app on a threaded WSGI server in a background thread, stopped by `close()`."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from werkzeug.serving import BaseWSGIServer, ThreadedWSGIServer, WSGIRequestHandler

from dashboard.app import create_app
from dashboard.operator import Resolver
from dashboard.queries.base import StoreReader
from fleetguard.config import Config

log = logging.getLogger(__name__)

MAX_CONNECTIONS: Final = 32  # served at once; more are closed at once rather than queued without bound
READ_TIMEOUT_SECONDS: Final = 30.0  # a client that sends nothing for this long is dropped


class _Handler(WSGIRequestHandler):
    timeout = (
        READ_TIMEOUT_SECONDS  # socketserver sets it on the connection: a silent client cannot pin a thread
    )

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        """The pages poll: a line per request would flood the daemon's log."""


class _BoundedServer(ThreadedWSGIServer):
    """Werkzeug's threaded server with a bound on connections served at once (a thread each)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


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


def _listen(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


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
    listener = _listen(address, config.dashboard.port if port is None else port)
    # Werkzeug binds by itself only to print its own lines and sys.exit() when the port is taken: it is
    # handed a socket already listening instead, and a taken port is an OSError for the caller to name.
    try:
        wsgi = _BoundedServer(address, 0, app.server, handler=_Handler, fd=listener.fileno())
    finally:
        listener.close()  # the server holds its own duplicate of the descriptor
    thread = threading.Thread(target=wsgi.serve_forever, name="fleetguard-dashboard", daemon=True)
    thread.start()
    return DashboardServer(wsgi, thread)
