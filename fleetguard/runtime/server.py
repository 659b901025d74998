"""The loopback HTTP endpoint that local ranks report to (POST /v1/report) and that answers
with their commands.

It binds loopback only: it is unauthenticated and can make ranks checkpoint or stop, so it must not be
reachable from the network. Bad input is answered 4xx and counted; no request can stop the server."""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fleetguard.clock import Clock
from fleetguard.runtime.commands import Command
from fleetguard.runtime.peer import Sender, tcp_peer
from fleetguard.runtime.protocol import MAX_REPORT_BYTES, RankReport, ReportError, parse_report
from fleetguard.runtime.ranks import LimitExceeded
from fleetguard.runtime.trust import ProcessIdentity, trusted_pid

log = logging.getLogger(__name__)

REPORT_PATH = "/v1/report"
HEALTH_PATH = "/v1/health"


class NonLoopbackBindError(ValueError):
    """The runtime endpoint was asked to listen beyond loopback."""


def require_loopback(address: str) -> str:
    """Return `address` if it is a loopback address (or "localhost"), else raise NonLoopbackBindError."""
    if address == "localhost":
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise NonLoopbackBindError(
            f"runtime bind address {address!r} is not an IP address; use 127.0.0.1 (loopback only)"
        ) from exc
    if not ip.is_loopback:
        raise NonLoopbackBindError(
            f"refusing to bind the runtime endpoint to {address}: it is unauthenticated and controls "
            "training ranks, so it listens on loopback only (127.0.0.1 or ::1)"
        )
    return address


@dataclass
class ServerStats:
    reports_accepted: int = 0
    reports_rejected: int = 0
    handler_errors: int = 0
    untrusted_pids: int = 0  # reports naming a pid that is not the sender's (another user, another namespace)
    reports_refused: int = 0  # reports whose sender cannot be identified
    reports_over_limit: int = 0  # reports that would take their owner or the agent over RuntimeLimits


ReportHandler = Callable[[RankReport], Sequence[Command]]


class RuntimeServer:
    """ThreadingHTTPServer on loopback; `on_report` stores a report, returns the rank's pending commands."""

    def __init__(
        self,
        on_report: ReportHandler,
        host: str,
        clock: Clock,
        bind_address: str = "127.0.0.1",
        port: int = 9477,
    ) -> None:
        self.stats = ServerStats()
        self._on_report = on_report
        self._host = host
        self._clock = clock
        address = require_loopback(bind_address)
        server_class = _IPv6Server if ":" in address else ThreadingHTTPServer
        self._httpd = server_class((address, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.stopping = False

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def address(self) -> str:
        return str(self._httpd.server_address[0])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.5},  # how soon stop() is noticed; each poll is a wake-up
            name="fleetguard-runtime-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (also for a server that was never started). Keep-alive
        connections outlive the listening socket, so their handlers answer 503 and hang up from now on."""
        self.stopping = True
        if self._thread is not None:
            self._httpd.shutdown()  # waits for serve_forever, so only when it runs
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def handle_body(
        self, body: bytes, sender: Sender | None, memo: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, object]]:
        """Status code and JSON answer for one report body (the HTTP handler's core, callable directly).
        `sender` is who sent it (None: unknown, refused); `memo` holds what was learned about the sender's
        connection (a connection belongs to one process, so its pid is checked once)."""
        if sender is None:
            self.stats.reports_refused += 1
            return 403, {"error": "the sender of this report cannot be identified"}
        try:
            report = parse_report(body, self._host, self._clock.time(), owner_uid=sender.uid)
        except ReportError as exc:
            self.stats.reports_rejected += 1
            return 400, {"error": str(exc)}
        process = _sender_process(sender, report.heartbeat.pid, memo if memo is not None else {})
        if process is None:
            # still telemetry (heartbeats, timings), but the agent will neither watch nor signal the pid
            self.stats.untrusted_pids += 1
        return self._deliver(replace(report, process=process))

    def _deliver(self, report: RankReport) -> tuple[int, dict[str, object]]:
        try:
            commands = self._on_report(report)
        except LimitExceeded as exc:
            self.stats.reports_over_limit += 1
            return 429, {"error": str(exc)}
        except Exception:
            self.stats.handler_errors += 1
            log.exception("runtime: storing a report failed")
            return 500, {"error": "internal error"}
        self.stats.reports_accepted += 1
        return 200, {"commands": [c.to_json() for c in commands]}


def _sender_process(sender: Sender, pid: int, memo: dict[str, Any]) -> ProcessIdentity | None:
    """trust.trusted_pid, once per (connection, pid)."""
    key = f"pid:{pid}"
    if key not in memo:
        memo[key] = trusted_pid(sender, pid)
    found: ProcessIdentity | None = memo[key]
    return found


class _IPv6Server(ThreadingHTTPServer):
    import socket as _socket

    address_family = _socket.AF_INET6


def _make_handler(server: RuntimeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one TCP connection per rank for its whole life
        server_version = "fleetguard-runtime"

        def do_POST(self) -> None:
            if server.stopping:
                self.close_connection = True
                self._reply(503, {"error": "agent is stopping"})
                return
            if self.path != REPORT_PATH:
                self._reply(404, {"error": f"unknown path {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                server.stats.reports_rejected += 1
                self._reply(411, {"error": "Content-Length required"})
                return
            if length < 0 or length > MAX_REPORT_BYTES:
                server.stats.reports_rejected += 1
                self.close_connection = True  # the body is not read: the connection cannot be reused
                self._reply(413, {"error": f"report larger than {MAX_REPORT_BYTES} bytes"})
                return
            if not hasattr(self, "_memo"):
                # One handler serves one kept-alive connection, whose sender cannot change: look it up once.
                client = (str(self.client_address[0]), int(self.client_address[1]))
                self._memo: dict[str, Any] = {}
                self._sender = tcp_peer(client, (server.address, server.port))
            status, answer = server.handle_body(self.rfile.read(length), self._sender, self._memo)
            self._reply(status, answer)

        def do_GET(self) -> None:
            if self.path == HEALTH_PATH:
                self._reply(200, {"status": "ok"})
            else:
                self._reply(404, {"error": f"unknown path {self.path}"})

        def _reply(self, status: int, answer: dict[str, object]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("runtime http: " + format, *args)

    return Handler
