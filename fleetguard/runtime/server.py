"""The loopback HTTP endpoint that local ranks report to (POST /v1/report) and that answers
with their commands.

It binds loopback only: it is unauthenticated and can make ranks checkpoint or stop, so it must not be
reachable from the network. Who sent a report, and what the agent may do to the process it names, is
decided by `trust` (docs/runtime.md, "Trust model"). Bad input is answered 4xx and counted; no request can
stop the server, and slow or silent connections hold no worker (fleetguard.httpserve)."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fleetguard.clock import Clock
from fleetguard.httpserve import Connection, HttpServer, HttpStats, Limits, Request, Response
from fleetguard.jobcontrol.commands import Command
from fleetguard.jobcontrol.peer import Sender, tcp_peer
from fleetguard.jobcontrol.trust import ProcessIdentity, trusted_pid
from fleetguard.runtime.protocol import (
    MAX_JSON_DEPTH,
    MAX_REPORT_BYTES,
    RankReport,
    ReportError,
    parse_report,
)
from fleetguard.runtime.ranks import LimitExceeded

log = logging.getLogger(__name__)

REPORT_PATH = "/v1/report"
HEALTH_PATH = "/v1/health"
# Ranks keep one connection each and report about once a second; a report is a few kB. Handlers are short
# (parse, a dict update), so a few workers serve hundreds of ranks, and a connection that sends nothing,
# or sends slowly, holds no worker (slowloris). One uid holds at most a quarter of the connections (its
# ranks' share, RuntimeLimits.max_ranks_per_uid, is 512), so a user holding all it may cannot lock out
# another's ranks.
HTTP_LIMITS = Limits(
    workers=4,
    backlog=1024,
    max_connections=2048,
    max_connections_per_owner=512,
    max_body_bytes=MAX_REPORT_BYTES,
    request_timeout_seconds=10.0,
    idle_timeout_seconds=120.0,
    max_json_depth=MAX_JSON_DEPTH,
)


class Stopping(RuntimeError):
    """Raised by a report handler that no longer takes reports (answered 503, nothing acknowledged)."""


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
    """The report endpoint on fleetguard.httpserve (read deadlines, bounded worker pool, one write per
    answer); `on_report` stores a report and returns the rank's pending commands."""

    def __init__(
        self,
        on_report: ReportHandler,
        host: str,
        clock: Clock,
        bind_address: str = "127.0.0.1",
        port: int = 9477,
        limits: Limits = HTTP_LIMITS,
    ) -> None:
        self.stats = ServerStats()
        self._on_report = on_report
        self._host = host
        self._clock = clock
        address = require_loopback(bind_address)
        self._http = HttpServer(
            self._handle, address, port, limits, name="fleetguard-runtime", owner_of=_sender_uid
        )
        self.stopping = False

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def address(self) -> str:
        return self._http.address

    @property
    def http_stats(self) -> HttpStats:
        """Connections, timeouts and malformed requests (counted before a report is parsed)."""
        return self._http.stats

    def start(self) -> None:
        self._http.start()

    def stop(self) -> None:
        """Stop accepting, answer what is in flight, close every connection (also for a server never
        started). A report that arrives from now on is answered 503, so nothing is acknowledged that
        the final flush would not see."""
        self.stopping = True
        self._http.stop()

    def _handle(self, request: Request) -> Response:
        if self.stopping:
            return Response.json(503, {"error": "agent is stopping"})
        if request.method == "GET" and request.path == HEALTH_PATH:
            return Response.json(200, {"status": "ok"})
        if request.method != "POST" or request.path != REPORT_PATH:
            return Response.json(404, {"error": f"unknown path {request.path}"})
        memo = request.connection.memo
        if "sender" not in memo:
            # a connection belongs to one process for its whole life: look its sender up once
            memo["sender"] = tcp_peer(request.connection.peer, request.connection.local)
        sender = memo["sender"]
        status, answer = self.handle_body(request.body, sender if isinstance(sender, Sender) else None, memo)
        return Response.json(status, answer)

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
        except Stopping:
            return 503, {"error": "agent is stopping"}
        except Exception:
            self.stats.handler_errors += 1
            log.exception("runtime: storing a report failed")
            return 500, {"error": "internal error"}
        self.stats.reports_accepted += 1
        return 200, {"commands": [c.to_json() for c in commands]}


def _sender_uid(connection: Connection) -> int | None:
    """The uid holding a new connection (its share of connections is capped); the sender is remembered for
    the connection's reports (a connection belongs to one process for its whole life)."""
    sender = tcp_peer(connection.peer, connection.local)
    connection.memo["sender"] = sender
    return None if sender is None else sender.uid


_PIDS_REMEMBERED = (
    8  # per connection: a rank names one pid; a client naming a new one each time gains nothing
)


def _sender_process(sender: Sender, pid: int, memo: dict[str, Any]) -> ProcessIdentity | None:
    """trust.trusted_pid, once per (connection, pid) for the last few pids a connection named."""
    known = memo.setdefault("pids", {})
    assert isinstance(known, dict)
    if pid in known:
        found: ProcessIdentity | None = known[pid]
        return found
    while len(known) >= _PIDS_REMEMBERED:
        del known[next(iter(known))]  # the oldest
    known[pid] = found = trusted_pid(sender, pid)
    return found
