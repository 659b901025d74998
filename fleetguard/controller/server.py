"""The controller's HTTP API on fleetguard.httpserve: POST /v1/ingest, POST /v1/commands, the read API
(GET /v1/...) and /metrics. Authentication and routing only; the work is in ingest, read_api and stats."""

from __future__ import annotations

import ipaddress
import random
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from fleetguard.clock import Clock
from fleetguard.controller import model_api, read_api
from fleetguard.controller.command_queue import CommandRefused
from fleetguard.controller.edge_pool import Edge, InProcessEdge
from fleetguard.controller.export_api import ExportRefused, ExportSnapshots
from fleetguard.controller.ingest import HELD_RETRY_SECONDS, IngestResult, IngestWriter
from fleetguard.controller.journal import JournalEntry
from fleetguard.controller.loop_ingest import LoopIngest
from fleetguard.controller.stats import ControllerStats, render
from fleetguard.controller.tokens import Identity, Role, TokenBook
from fleetguard.controller.validate import WIRE_VERSIONS, BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.httpserve import HttpError, Request, Response
from fleetguard.shipping.commands import CommandKind
from fleetguard.store import Store
from fleetguard.store.repair_tables import MAX_SINCE_SECONDS, repairs_document

COMMIT_WAIT_SECONDS = 30.0  # past this the agent is told 503 and re-sends; the ledger stores it once
MAX_IN_FLIGHT_PER_HOST = 4
DEFAULT_REPAIRS_SECONDS = 30 * 86400.0  # `fleetguard repairs --since`'s default


@dataclass(frozen=True)
class ApiSettings:
    read_needs_token: bool  # reads_need_token(listen address): False on loopback only
    silent_after_seconds: float = 0.0
    model_dir: str = ""  # [predictor] model_dir: the registry's models live there
    # `up`'s API: the reads only. Its agent ships in process; nothing else may ship to it or queue commands.
    reads_only: bool = False


def reads_need_token(address: str) -> bool:
    """Whether GET /v1/... and /metrics need an operator token: on any address but loopback, where every
    client is another user of this host or beyond it, reads are the fleet's layout and are authenticated."""
    return not is_loopback(address)


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class ControllerApi:
    def __init__(
        self,
        store: Store,
        writer: IngestWriter,
        tokens: TokenBook,
        stats: ControllerStats,
        clock: Clock,
        settings: ApiSettings,
        edge: Edge | None = None,
    ) -> None:
        self.store = store
        self.writer = writer
        self.tokens = tokens
        self.stats = stats
        self.clock = clock
        self.settings = settings
        self._in_flight: dict[str, int] = {}
        self._lock = threading.Lock()
        # gunzip, decode and every check of a body: in this process, or in edge processes (edge_pool)
        self.edge: Edge = edge or InProcessEdge()
        self._local = threading.local()
        self.exports = ExportSnapshots(store.path)
        # Ingest on the server's loop (loop_ingest): where each answer waits only on the journal and the
        # checks do not block (in process). start_controller starts its journal thread; close() stops it.
        self.loop_ingest: LoopIngest | None = None
        if writer.journal is not None and isinstance(self.edge, InProcessEdge) and not settings.reads_only:
            self.loop_ingest = LoopIngest(self, writer)
        self._routes: dict[tuple[str, str], Callable[[Request], Response]] = {
            ("POST", "/v1/ingest"): self.ingest,
            ("POST", "/v1/commands"): self.queue_command,
            ("GET", "/v1/commands"): self.list_commands,
            ("GET", "/v1/fleet"): self.fleet,
            ("GET", "/v1/hosts"): self.hosts,
            ("GET", "/v1/jobs"): self.jobs,
            ("GET", "/v1/findings"): self.findings,
            ("GET", "/v1/breaker"): self.breaker,
            ("GET", "/v1/alerts"): self.alerts,
            ("GET", "/v1/repairs"): self.repairs,
            ("POST", "/v1/export"): self.export,
            ("GET", "/metrics"): self.metrics,
            ("GET", "/v1/models"): self.models,
            ("POST", "/v1/models/promote"): self.promote_model,
            ("POST", "/v1/models/rollback"): self.rollback_model,
        }
        if settings.reads_only:
            del self._routes[("POST", "/v1/ingest")], self._routes[("POST", "/v1/commands")]

    def __call__(self, request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        route = self._routes.get((method, request.path))
        if route is not None:
            return route(request)
        if method == "GET" and request.path.startswith("/v1/hosts/"):
            return self.host(request)
        if method == "GET" and request.path.startswith("/v1/export/"):
            return self.export_file(request)
        if any(path == request.path for _, path in self._routes):
            raise HttpError(405, f"{request.method} is not allowed on {request.path}")
        if method == "GET" and request.path.startswith(model_api.PREFIX):
            self._require_reader(request)
            return model_api.show(self._cursor(), request)
        raise HttpError(404, f"no such endpoint {request.path[:100]}")

    # ---- ingest ---------------------------------------------------------------------------------------

    def ingest(self, request: Request) -> Response:
        try:
            batch, entry = self.checked_entry(request)
            return self._commit(batch.host, batch, entry)
        except BatchRefused as exc:
            return self.refused(exc)

    def known_identity(self, request: Request) -> Identity | None:
        """Who sent it, if the tokens read already say so without a look at the file (TokenBook.known)."""
        return self.tokens.known(request.headers.get("authorization"))

    def checked_entry(
        self, request: Request, inflated: bytes | None = None, identity: Identity | None = None
    ) -> tuple[IngestBatch, JournalEntry | None]:
        """Who sent it, and the batch checked (BatchRefused naming why not); with a journal, its entry.
        `inflated`: the body already gunzipped (the loop's reading, `loop_ingest`), checked here and now
        rather than by the edge (whose bound on parses at once would block the loop). `identity`: the
        sender as the loop knew it already (`known_identity`), else looked up here."""
        if identity is None:
            identity = self._identify(request)
        if identity is None:
            raise BatchRefused(Refusal.UNAUTHENTICATED, "a bearer token of this host is required")
        if identity.role is not Role.AGENT:
            raise BatchRefused(Refusal.WRONG_HOST, "an operator token cannot ship batches")
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding not in ("gzip", "identity"):
            raise BatchRefused(Refusal.MALFORMED, f"Content-Encoding {encoding[:20]!r} is not gzip")
        now = self.clock.time()
        compressed = encoding == "gzip"
        if inflated is not None:
            batch = parse_batch(inflated, identity.host, compressed=False, now=now)
        else:
            batch = self.edge.parse(request.body, identity.host, compressed=compressed, now=now)
        entry = None
        if self.writer.journal is not None:
            entry = JournalEntry(batch.host, request.body, compressed, now)
        return batch, entry

    def hold_host(self, host: str) -> None:
        """Count one more batch of `host` in flight; BatchRefused (busy) past MAX_IN_FLIGHT_PER_HOST."""
        with self._lock:
            if self._in_flight.get(host, 0) >= MAX_IN_FLIGHT_PER_HOST:
                raise BatchRefused(Refusal.BUSY, "this host has batches in flight; send one at a time")
            self._in_flight[host] = self._in_flight.get(host, 0) + 1

    def release_host(self, host: str) -> None:
        with self._lock:
            left = self._in_flight[host] - 1
            if left:
                self._in_flight[host] = left
            else:
                del self._in_flight[host]

    def committed_reply(self, seq: int, result: IngestResult) -> Response:
        return _committed_reply(seq, result)

    def _commit(self, host: str, batch: IngestBatch, entry: JournalEntry | None = None) -> Response:
        """Answered once the batch is committed or, with `entry`, once it is in the controller's journal
        (the writer commits it to the store after)."""
        self.hold_host(host)
        try:
            if entry is not None:
                (answer,) = self.writer.accept([(batch, entry)])
                if isinstance(answer, BatchRefused):
                    raise answer
                return _committed_reply(batch.seq, answer)
            pending = self.writer.submit(batch)
            # Given up exactly (under the writer's lock): a 503 carries no command, so the commit then
            # counts none; an answer whose commands the commit chose first is given, not a 503.
            if not self.writer.wait_answer(pending, COMMIT_WAIT_SECONDS):
                raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later")
            if pending.error is not None:
                raise pending.error
            assert pending.result is not None
            return _committed_reply(batch.seq, pending.result)
        finally:
            self.release_host(host)

    def refused(self, exc: BatchRefused) -> Response:
        self.stats.refuse(exc.reason.value)
        headers: tuple[tuple[str, str], ...] = ()
        if exc.status in (429, 503):
            # Spread the retries of many agents; more when the queue is long. A held host waits for an
            # operator: asking every second or two would only cost the controller.
            wait = 1 + self.stats.queue_depth // 500 + random.randint(0, 2)
            if exc.reason is Refusal.HELD:
                wait = HELD_RETRY_SECONDS + random.randint(0, 10)
            headers = (("Retry-After", str(wait)),)
        doc = {"error": exc.message, "reason": exc.reason.value}
        return Response(exc.status, Response.json(exc.status, doc).body, "application/json", headers)

    # ---- commands -------------------------------------------------------------------------------------

    def queue_command(self, request: Request) -> Response:
        self._require_operator(request)
        doc = request.json()
        if not isinstance(doc, dict):
            raise HttpError(400, "expected {host, kind, job_id, reason}")
        host, kind, job_id, reason = (
            doc.get("host"),
            doc.get("kind"),
            doc.get("job_id"),
            doc.get("reason", ""),
        )
        if not isinstance(host, str) or not 0 < len(host) <= 256:
            raise HttpError(400, "host: expected a host name")
        if kind not in {k.value for k in CommandKind}:
            raise HttpError(400, f"kind: one of {', '.join(k.value for k in CommandKind)}")
        if job_id is not None and (not isinstance(job_id, str) or len(job_id) > 256):
            raise HttpError(400, "job_id: expected a string")
        if not isinstance(reason, str) or len(reason) > 1024:
            raise HttpError(400, "reason: expected a string")
        try:
            command = self.writer.queue_command(host, CommandKind(kind), job_id, reason or "operator")
        except CommandRefused as exc:
            raise HttpError(409, str(exc)) from exc
        except BatchRefused as exc:
            return self.refused(exc)
        return Response.json(201, {"command": command.to_json(), "host": host})

    def list_commands(self, request: Request) -> Response:
        self._require_reader(request)
        params = _query(request)
        host = params.get("host")
        return Response.json(200, read_api.commands(self._cursor(), host, _int(params, "limit", 100)))

    # ---- reads ----------------------------------------------------------------------------------------

    def fleet(self, request: Request) -> Response:
        self._require_reader(request)
        doc = read_api.fleet(
            self._cursor(),
            self.writer.host_states(),
            self.clock.time(),
            self._silent,
            queue_batches=self.writer.queue_depth,
            held_hosts=self.writer.held_hosts(),
        )
        return Response.json(200, doc)

    def hosts(self, request: Request) -> Response:
        self._require_reader(request)
        return Response.json(
            200,
            read_api.host_list(
                self._cursor(),
                self.writer.host_states(),
                self.clock.time(),
                self._silent,
                boot_ids=self._is_operator(request),
            ),
        )

    def host(self, request: Request) -> Response:
        self._require_reader(request)
        name = urllib.parse.unquote(request.path[len("/v1/hosts/") :])
        state = next((h for h in self.writer.host_states() if h.host == name), None)
        if state is None:
            raise HttpError(404, f"no host {name[:100]!r} has shipped to this controller")
        return Response.json(
            200,
            read_api.host_detail(
                self._cursor(), state, self.clock.time(), self._silent, boot_ids=self._is_operator(request)
            ),
        )

    def jobs(self, request: Request) -> Response:
        self._require_reader(request)
        return Response.json(200, read_api.jobs(self._cursor(), self.clock.time()))

    def findings(self, request: Request) -> Response:
        self._require_reader(request)
        params = _query(request)
        now = self.clock.time()
        since = _float(params, "since", now - read_api.RECENT_SECONDS)
        doc = read_api.findings(
            self._cursor(), since, _int(params, "limit", 1000), boot_ids=self._is_operator(request)
        )
        return Response.json(200, doc)

    def breaker(self, request: Request) -> Response:
        self._require_reader(request)
        return Response.json(200, read_api.breaker(self._cursor()))

    def alerts(self, request: Request) -> Response:
        self._require_reader(request)
        from fleetguard.alerts.status_doc import alerts_status

        return Response.json(200, alerts_status(self._cursor(), self.clock.time()))

    def repairs(self, request: Request) -> Response:
        """`fleetguard repairs` asked of the running process: ?since_seconds=N (default 30 days)."""
        self._require_reader(request)
        since = _float(_query(request), "since_seconds", DEFAULT_REPAIRS_SECONDS)
        if not 0 < since <= MAX_SINCE_SECONDS:
            raise HttpError(400, f"since_seconds: expected 0 < seconds <= {MAX_SINCE_SECONDS:.0f}")
        return Response.json(200, repairs_document(self._cursor(), since, self.clock.time()))

    def export(self, request: Request) -> Response:
        """A consistent snapshot of every table, kept for the caller to fetch (controller/export_api.py).
        Reads of the whole history: the reads' rule, and boot ids for operators only (as /v1/hosts)."""
        self._require_reader(request)
        try:
            doc = self.exports.make(self._cursor(), operator=self._is_operator(request))
        except ExportRefused as exc:
            raise HttpError(exc.status, str(exc)) from exc
        return Response.json(201, doc)

    def export_file(self, request: Request) -> Response:
        self._require_reader(request)
        parts = request.path[len("/v1/export/") :].split("/")
        if len(parts) != 3:
            raise HttpError(404, "expected /v1/export/<export id>/<table>/<part>")
        try:
            body = self.exports.file(*(urllib.parse.unquote(p) for p in parts))
        except ExportRefused as exc:
            raise HttpError(exc.status, str(exc)) from exc
        return Response(200, body, "application/vnd.apache.parquet")

    def close(self) -> None:
        """Remove what the API keeps on disk (an export's snapshot) and end the edge processes; after the
        server has stopped."""
        if self.loop_ingest is not None:
            self.loop_ingest.journal_thread.stop()
        self.exports.close()
        self.edge.stop()

    def metrics(self, request: Request) -> Response:
        # Host names, job and silence states: as much a read of the fleet as /v1/hosts, so the same rule.
        self._require_reader(request)
        self.stats.queue_depth = self.writer.queue_depth
        hosts, now = self.writer.host_states(), self.clock.time()
        health = read_api.host_health(self._cursor(), hosts, now, self._silent)
        body = render(self.stats, hosts, now, self._silent, health)
        return Response(200, body, "text/plain; version=0.0.4; charset=utf-8")

    # ---- the model registry: reads like the other reads, changes with an operator token only ----------

    def models(self, request: Request) -> Response:
        self._require_reader(request)
        return model_api.listing(self._cursor())

    def promote_model(self, request: Request) -> Response:
        self._require_operator(request)
        return model_api.promote(self._cursor(), self.settings.model_dir, request)

    def rollback_model(self, request: Request) -> Response:
        self._require_operator(request)
        return model_api.rollback(self._cursor(), request)

    # ---- helpers --------------------------------------------------------------------------------------

    @property
    def _silent(self) -> float:
        return self.settings.silent_after_seconds

    def _identify(self, request: Request) -> Identity | None:
        return self.tokens.identify(request.headers.get("authorization"))

    def _require_operator(self, request: Request) -> None:
        identity = self._identify(request)
        if identity is None:
            self.stats.refuse(Refusal.UNAUTHENTICATED.value)
            raise HttpError(401, "an operator token is required")
        if identity.role is not Role.OPERATOR:
            self.stats.refuse(Refusal.WRONG_HOST.value)
            raise HttpError(403, "an agent token cannot do this; use an operator token")

    def _is_operator(self, request: Request) -> bool:
        """Agents' boot ids go only to operators (a host that knew another's could forge its message ids)."""
        identity = self._identify(request)
        return identity is not None and identity.role is Role.OPERATOR

    def _require_reader(self, request: Request) -> None:
        if self.settings.read_needs_token:
            self._require_operator(request)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor per worker thread, made once (DuckDB connections are not shared between threads)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self.store.cursor()
            self._local.cursor = cursor
        return cursor


def _query(request: Request) -> dict[str, str]:
    return {k: v[-1] for k, v in urllib.parse.parse_qs(request.query).items()}


def _float(params: dict[str, str], name: str, default: float) -> float:
    text = params.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise HttpError(400, f"{name}: expected epoch seconds") from None
    if not 0 <= value <= 1e11:
        raise HttpError(400, f"{name}: expected epoch seconds")
    return value


def _int(params: dict[str, str], name: str, default: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 6:  # str.isdigit takes "²", int() does not
        raise HttpError(400, f"{name}: expected a positive integer")
    return int(text)


def _committed_reply(seq: int, result: IngestResult) -> Response:
    """The agent's answer: its batch is kept (committed, or in the journal), with its host's commands, and
    the wire versions this controller reads (an agent sends version 2 only once it has read this)."""
    return Response.json(
        200,
        {
            "committed": True,
            "duplicate": result.duplicate,
            "seq": seq,
            "commands": [c.to_json() for c in result.commands],
            "wire": list(WIRE_VERSIONS),
        },
    )
