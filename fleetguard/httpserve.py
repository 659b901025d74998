"""A hardened HTTP/1.1 server for fleetguard's endpoints: runtime reports, /metrics, the controller's API,
the dashboard (through `fleetguard.wsgi_adapter`).

One asyncio loop on one thread reads every connection; a fixed pool of worker threads runs the handler for
complete requests only. So a slow or silent client (slowloris) holds no thread, only a small buffer until its
deadline closes it; a request's head and body must arrive within `Limits.request_timeout_seconds`, a new
connection's head within `Limits.head_timeout_seconds` of its accept however slowly it trickles in, and a
kept-alive connection may sit idle for `Limits.idle_timeout_seconds`. Bodies above `Limits.max_body_bytes`
are answered 413 unread; JSON nested deeper than `Limits.max_json_depth` is a 400, never a RecursionError.
Each response is written with one send on a TCP_NODELAY socket, so a keep-alive round trip does not wait
for a delayed ACK.

Usage::

    from fleetguard.httpserve import HttpError, HttpServer, Request, Response

    def handle(request: Request) -> Response:            # runs on a worker thread
        if request.method == "POST" and request.path == "/v1/report":
            doc = request.json()                           # 400 on bad or too deeply nested JSON
            return Response.json(200, {"ok": True})
        raise HttpError(404, f"unknown path {request.path}")  # answered {"error": "..."}

    server = HttpServer(handle, "127.0.0.1", 9477)         # binds now: BindError names address and port
    server.start()
    ...
    server.stop()                                          # stop accepting, finish in-flight, close all

`inline=True` runs the handler on the server's loop thread instead of a worker: only for a handler that never
blocks. `quick=` is the middle way: a function run on the loop thread first that answers at once, returns a
future the loop awaits (the handler's own thread settles it: the controller's ingest, where one thread
journals every batch gathered meanwhile), or returns None, and only then is `handler` run on a worker (the
/metrics one answers with bytes it already holds, and waits for a rendering only on a worker). `submit()`
runs work of the server's own on its workers (the /metrics text rendered ahead of the scrapes).
`ssl_context=` serves HTTPS.

`request.connection.memo` keeps per-connection facts a handler looks up once (a sender's uid): a
connection's requests are handled one at a time, in order. `owner_of=` names who holds a new connection (run
on a worker once, before its first request; it may fill `memo`); `owner_now=`, where given, is asked first on
the loop thread and either names the owner without blocking or returns `LOOKUP_BLOCKS` (then `owner_of` runs
on a worker as before), and `Limits.max_connections_per_owner` caps
each owner's share. `Limits.max_connections_per_address` caps each client address's share at accept (an
IPv6 client's /64 is one address). A connection beyond any share is answered 503 with Retry-After and
closed while the others are served.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import ipaddress
import itertools
import json
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    workers: int = 8  # handler threads
    backlog: int = 1024  # listen backlog: a burst of connections queues instead of being dropped
    max_connections: int = 4096  # beyond this a new connection is answered 503 and closed
    # Beyond this many from one owner (HttpServer's `owner_of`: a local sender's uid) likewise, so that one
    # user holding connections cannot take every one there is. None: no per-owner cap.
    max_connections_per_owner: int | None = None
    # Beyond this many from one client address (an IPv6 client's /64) likewise, checked at accept with no
    # lookup: a network peer holding half-open connections cannot take every slot. None: no per-address cap.
    max_connections_per_address: int | None = None
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    max_body_bytes: int = 1 << 20
    request_timeout_seconds: float = 10.0  # from a request's first byte to its last
    # From a new connection's accept (a kept-alive one's next first byte) to the end of the request head,
    # however the bytes trickle in: a client sending one byte every few seconds is cut off. None: as
    # request_timeout_seconds (the body then has the rest of the request's deadline).
    head_timeout_seconds: float | None = None
    idle_timeout_seconds: float = 120.0  # a kept-alive connection without a new request
    write_timeout_seconds: float = 10.0  # a client that does not read its answer
    max_json_depth: int = 64
    shutdown_grace_seconds: float = 5.0  # in-flight handlers get this long at stop()


class HttpError(Exception):
    """Raise from a handler (or `Request.json`) to answer `status` with {"error": message}."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BindError(OSError):
    """The server cannot listen where asked; `str()` is one line naming the address and port (`errno` and
    `strerror` are the socket's)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "cannot listen"


WILDCARD_ADDRESSES: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 (read back, never bound here)


def bound_url(address: str, port: int, path: str = "/", scheme: str = "http") -> str:
    """Where a listener is, as bound: its own address (0.0.0.0 stays 0.0.0.0, every interface, never shown as
    127.0.0.1), the port it got (not the 0 that was asked), an IPv6 address in brackets."""
    shown = address or "0.0.0.0"  # noqa: S104 (shown, not bound)
    shown = f"[{shown}]" if ":" in shown else shown
    return f"{scheme}://{shown}:{port}{path}"


def bound_where(address: str, port: int, path: str = "/", scheme: str = "http") -> str:
    """`bound_url`, and for a wildcard address the fact that it is every interface: the banners' form."""
    url = bound_url(address, port, path, scheme)
    return f"{url} (every interface)" if address in WILDCARD_ADDRESSES else url


class JsonBodyError(ValueError):
    """A body that is not JSON, or is nested deeper than allowed."""


@dataclass
class Connection:
    """One client connection. `memo` is for the handler: facts about the peer it looks up once."""

    id: int
    peer: tuple[str, int]
    local: tuple[str, int]
    memo: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # as sent, e.g. /metrics?name=x
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    connection: Connection
    max_json_depth: int = Limits.max_json_depth

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]

    def json(self) -> Any:
        """The body as JSON; HttpError(400) if it is not JSON or is nested too deeply."""
        try:
            return loads_json(self.body, self.max_json_depth)
        except JsonBodyError as exc:
            raise HttpError(400, str(exc)) from exc


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, doc: object) -> Response:
        return cls(status, json.dumps(doc).encode(), "application/json")

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, text.encode())


class Lookup(enum.Enum):
    BLOCKS = "blocks"  # owner_now cannot name the owner without blocking: ask owner_of on a worker


LOOKUP_BLOCKS: Final = Lookup.BLOCKS

Handler = Callable[[Request], Response]
# loop thread: an answer now, an answer to come (a future the loop awaits: work handed to a thread of the
# handler's own, not a worker), or None (ask handler)
QuickHandler = Callable[[Request], "Response | asyncio.Future[Response] | None"]
OwnerOf = Callable[["Connection"], Hashable]


@dataclass
class HttpStats:
    """Counts since start, updated on the server's loop thread (read them anywhere; they only grow)."""

    connections_accepted: int = 0
    connections_refused: int = 0  # over max_connections, an owner's or an address's share
    requests: int = 0
    timeouts: int = 0  # connections closed for being too slow (head, body or answer)
    bad_requests: int = 0  # malformed, too large, unsupported
    handler_errors: int = 0  # handler raised something other than HttpError: answered 500


# ---- JSON with a depth limit ---------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST_PAIR = re.compile(rb"\[\]|\{\}")


def json_depth_exceeds(body: bytes, max_depth: int) -> bool:
    """Whether the brackets in `body` (outside strings) nest deeper than `max_depth`. Each pass removes the
    innermost pairs in C, so the cost is at most `max_depth` scans of the body whatever it holds."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    for _ in range(max_depth):
        if not brackets:
            return False
        shorter = _INNERMOST_PAIR.sub(b"", brackets)  # one level: "[{}]" becomes "[]", not ""
        if shorter == brackets:
            return False  # unbalanced, so not JSON: json.loads refuses it (RecursionError if deep)
        brackets = shorter
    return bool(brackets)


def loads_json(body: bytes, max_depth: int = Limits.max_json_depth) -> Any:
    """Parse a JSON body; JsonBodyError (one line) if it is not JSON or nests deeper than `max_depth`."""
    if json_depth_exceeds(body, max_depth):
        raise JsonBodyError(f"JSON nested deeper than {max_depth} levels")
    try:
        doc = json.loads(body)
    except RecursionError as exc:  # unbalanced and deep: refused by the check's fallback above
        raise JsonBodyError(f"JSON nested deeper than {max_depth} levels") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonBodyError(f"body is not JSON: {exc}") from exc
    if holds_lone_surrogate(body, doc):
        raise JsonBodyError("body is not JSON text: a \\u escape names a lone UTF-16 surrogate")
    return doc


def holds_lone_surrogate(body: bytes, doc: object) -> bool:
    """Whether `doc`, parsed from `body`, holds a string with an unpaired UTF-16 surrogate. json.loads turns
    an unpaired "\\ud800" into a str that no UTF-8 column, file or log can hold: the store would refuse the
    batch holding it long after the request was answered 200."""
    return _SURROGATE_ESCAPE.search(body) is not None and not _encodable(doc)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # only then can a string hold a lone surrogate


def _encodable(doc: object) -> bool:
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ---- wire format ---------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True)
class _Head:
    method: str
    target: str
    version: str
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


def _parse_head(raw: bytes, max_headers: int) -> _Head:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise HttpError(400, "malformed request line")
    if parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported protocol {parts[2][:16]!r}")
    header_lines = [line for line in lines[1:] if line]
    if len(header_lines) > max_headers:
        raise HttpError(431, f"more than {max_headers} header fields")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise HttpError(400, "malformed header field")
        key = name.lower()
        if key in headers and key == "content-length" and headers[key] != value.strip():
            raise HttpError(400, "conflicting Content-Length")
        headers[key] = value.strip()
    return _Head(parts[0], parts[1], parts[2], headers)


def _content_length(head: _Head, max_body_bytes: int) -> int:
    if "transfer-encoding" in head.headers:
        raise HttpError(411, "Content-Length required (chunked bodies are not accepted)")
    text = head.headers.get("content-length", "0")
    if not text.isdigit() or not text.isascii():
        raise HttpError(400, "bad Content-Length")
    if len(text) > 18 or int(text) > max_body_bytes:
        raise HttpError(413, f"body larger than {max_body_bytes} bytes")
    return int(text)


def encode_response(response: Response, keep_alive: bool, head_only: bool = False) -> bytes:
    """Status line, headers and body as one bytes object, to be written with one send."""
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = ""
    fields = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        ("Connection", "keep-alive" if keep_alive else "close"),
        *response.headers,
    ]
    for name, value in fields:
        if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} would break the response")
    head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields)
    return head.encode("latin-1") + b"\r\n" + (b"" if head_only else response.body)


def _error_response(exc: HttpError) -> Response:
    return Response.json(exc.status, {"error": exc.message})


_LINGER_SECONDS = 1.0
_MAX_REFUSED_LINGERING = 256  # refused connections waiting for their client to read the 503
OWNER_LOOKUP_THREADS = 2  # a lookup is one netlink round trip (or a /proc read where netlink is missing)

# ---- the server ----------------------------------------------------------------------------------------


class HttpServer:
    """Serve `handler` on `address:port` (port 0: any free port, see `.port`). Binds in the constructor."""

    def __init__(
        self,
        handler: Handler,
        address: str = "127.0.0.1",
        port: int = 0,
        limits: Limits | None = None,
        name: str = "fleetguard-http",
        ssl_context: ssl.SSLContext | None = None,
        inline: bool = False,
        owner_of: OwnerOf | None = None,
        quick: QuickHandler | None = None,
        owner_now: OwnerOf | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self._owner_of = owner_of
        self._owner_now = owner_now
        self._quick = quick
        self._per_owner: dict[Hashable, int] = {}  # owner -> connections held (loop thread only)
        self._per_address: dict[str, int] = {}  # client address key -> connections held (loop thread only)
        self.stats = HttpStats()
        self._handler = handler
        self._name = name
        self._ssl = ssl_context  # HTTPS: the handshake runs on the loop, under the request deadline's cover
        # The handler runs on the loop thread itself: only for one that never blocks (serving bytes it holds),
        # where the hop to a worker thread would cost more than the answer.
        self._inline = inline
        self._sock = _listen(address, port, self.limits.backlog)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(self.limits.workers, f"{name}-worker")
        # Who holds a new connection is looked up on threads of its own: behind handlers that wait (on a
        # slow analysis, say) the lookups of new connections would queue until they time out.
        self._owner_executor = concurrent.futures.ThreadPoolExecutor(OWNER_LOOKUP_THREADS, f"{name}-owner")
        self._writers: dict[int, tuple[asyncio.StreamWriter, bool]] = {}  # id -> (writer, busy)
        self._ids = itertools.count(1)
        self._stopping = False
        self._server: asyncio.AbstractServer | None = None
        self._start_error: BaseException | None = None
        self._refused_lingering = 0

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def address(self) -> str:
        return str(self._sock.getsockname()[0])

    def start(self) -> None:
        """Serve on a thread of its own; returns once the server accepts connections."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=self._name, daemon=True)
        self._thread.start()
        ready.wait()
        if self._start_error is not None:
            raise self._start_error

    def stop(self) -> None:
        """Stop accepting, close idle connections, give in-flight requests `shutdown_grace_seconds` to be
        answered, then close everything. Safe to call twice, or on a server never started."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            try:
                future.result(timeout=self.limits.shutdown_grace_seconds + 5)
            except (concurrent.futures.TimeoutError, RuntimeError):
                log.warning("%s: shutdown did not finish in time", self._name)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
        self._sock.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._owner_executor.shutdown(wait=False, cancel_futures=True)

    def submit(self, work: Callable[[], object]) -> bool:
        """Run `work` on one of the handler workers (its exceptions are logged); False once stopped."""
        try:
            self._executor.submit(self._run_logged, work)
        except RuntimeError:  # the executor is shut down: the server has stopped
            return False
        return True

    def _run_logged(self, work: Callable[[], object]) -> None:
        try:
            work()
        except Exception:
            log.exception("%s: background work failed", self._name)

    def __enter__(self) -> HttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- loop thread ----------------------------------------------------------------------------------

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(
                    self._serve,
                    sock=self._sock,
                    limit=self.limits.max_header_bytes,
                    backlog=self.limits.backlog,
                    ssl=self._ssl,
                    ssl_handshake_timeout=self.limits.request_timeout_seconds if self._ssl else None,
                )
            )
            ready.set()
            loop.run_forever()
        except BaseException as exc:  # start() raises it in the caller's thread
            self._start_error = exc
        finally:
            ready.set()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _shutdown(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for writer, busy in list(self._writers.values()):
            if not busy:
                writer.close()
        deadline = asyncio.get_running_loop().time() + self.limits.shutdown_grace_seconds
        while any(busy for _, busy in self._writers.values()):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        for writer, _ in list(self._writers.values()):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve_connection(reader, writer)
        except asyncio.CancelledError:
            # The loop is tearing down. Python 3.11's stream callback calls exception() on a cancelled
            # connection task, which logs the CancelledError at ERROR: end the task quietly instead.
            writer.transport.abort()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn_id = next(self._ids)
        self.stats.connections_accepted += 1
        if len(self._writers) >= self.limits.max_connections or self._stopping:
            await self._refuse(reader, writer, "too many connections")
            return
        accepted = asyncio.get_running_loop().time()
        connection = Connection(conn_id, _address(writer, "peername"), _address(writer, "sockname"))
        address = address_key(connection.peer[0])
        share = self.limits.max_connections_per_address
        if share is not None and self._per_address.get(address, 0) >= share:
            await self._refuse(reader, writer, "too many connections from this address")
            return
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self._writers[conn_id] = (writer, False)
        owner: Hashable = None
        counted = False
        try:
            if self._owner_of is not None:
                owner = await self._owner(connection)
                cap = self.limits.max_connections_per_owner
                if cap is not None and self._per_owner.get(owner, 0) >= cap:
                    self._writers.pop(conn_id, None)
                    await self._refuse(reader, writer, "too many connections from this user")
                    return
                self._per_owner[owner] = self._per_owner.get(owner, 0) + 1
                counted = True
            await self._converse(reader, writer, connection, accepted)
        except (ConnectionError, OSError):
            pass  # the peer went away: nothing to answer
        finally:
            _release(self._per_address, address)
            if counted:
                left = self._per_owner[owner] - 1
                if left:
                    self._per_owner[owner] = left
                else:
                    del self._per_owner[owner]
            if self._writers.pop(conn_id, None) is not None:
                await _linger_close(reader, writer)

    async def _owner(self, connection: Connection) -> Hashable:
        """Who holds `connection` (`owner_now` on the loop where it can tell without blocking, else
        `owner_of` on a worker: it may read /proc); None when that fails."""
        assert self._owner_of is not None
        if self._owner_now is not None:
            try:
                owner = self._owner_now(connection)
            except Exception:
                log.exception("%s: looking up who holds a connection failed", self._name)
                return None
            if owner is not LOOKUP_BLOCKS:
                return owner
        try:
            async with asyncio.timeout(self.limits.request_timeout_seconds):
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._owner_executor, self._owner_of, connection)
        except TimeoutError:
            log.warning("%s: looking up who holds a connection took too long", self._name)
            return None
        except Exception:
            log.exception("%s: looking up who holds a connection failed", self._name)
            return None

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, why: str) -> None:
        self.stats.connections_refused += 1
        refusal = _error_response(HttpError(503, why))
        # a client that honours it (the agents' shippers do) comes back when a connection may be free
        writer.write(encode_response(dataclasses.replace(refusal, headers=(("Retry-After", "1"),)), False))
        if self._refused_lingering >= _MAX_REFUSED_LINGERING:
            writer.transport.abort()  # a flood: no socket may outstay its refusal
            return
        self._refused_lingering += 1
        try:
            await _linger_close(reader, writer)
        finally:
            self._refused_lingering -= 1

    async def _converse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: Connection,
        accepted: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        head_seconds = self.limits.head_timeout_seconds or self.limits.request_timeout_seconds
        fresh = True
        while not self._stopping:
            # A new connection must send its whole head within the head deadline from accept; a kept-alive
            # one may wait for its next request.
            idle_until = accepted + head_seconds if fresh else loop.time() + self.limits.idle_timeout_seconds
            try:
                async with asyncio.timeout_at(idle_until):
                    first = await reader.read(1)
            except TimeoutError:
                self.stats.timeouts += int(fresh)
                return
            if not first:
                return  # the client closed its side
            started = loop.time()
            head_until = min(
                (accepted if fresh else started) + head_seconds, started + self.limits.request_timeout_seconds
            )
            self._writers[connection.id] = (writer, True)
            keep_alive = await self._exchange(first, reader, writer, connection, (head_until, started))
            self._writers[connection.id] = (writer, False)
            if not keep_alive:
                return
            fresh = False

    async def _exchange(
        self,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: Connection,
        deadlines: tuple[float, float],
    ) -> bool:
        """Read one request (its head by `deadlines[0]`, all of it within request_timeout_seconds of its
        first byte at `deadlines[1]`), answer it; whether the connection stays open."""
        head_until, started = deadlines
        try:
            async with asyncio.timeout_at(head_until):
                head = await self._read_head(first, reader)
            body = b""
            if "content-length" in head.headers or "transfer-encoding" in head.headers:
                # a deadline (a timer on the loop) only where there is a body to wait for: a GET has none
                async with asyncio.timeout_at(started + self.limits.request_timeout_seconds):
                    body = await self._read_body(head, reader, writer)
        except TimeoutError:
            self.stats.timeouts += 1
            return False
        except HttpError as exc:
            self.stats.bad_requests += 1
            await self._write(writer, encode_response(_error_response(exc), keep_alive=False))
            return False
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            self.stats.bad_requests += 1
            if not reader.at_eof():
                too_large = HttpError(431, "request head too large")
                await self._write(writer, encode_response(_error_response(too_large), keep_alive=False))
            return False
        self.stats.requests += 1
        request = Request(
            head.method, head.target, head.headers, body, connection, self.limits.max_json_depth
        )
        response = await self._answer(request)
        keep_alive = head.keep_alive and not self._stopping
        await self._write(writer, encode_response(response, keep_alive, head_only=head.method == "HEAD"))
        return keep_alive

    async def _read_head(self, first: bytes, reader: asyncio.StreamReader) -> _Head:
        raw = (first + await reader.readuntil(b"\r\n\r\n")).lstrip(b"\r\n")
        if len(raw) > self.limits.max_header_bytes:
            raise HttpError(431, "request head too large")
        return _parse_head(raw[:-4], self.limits.max_headers)

    async def _read_body(
        self, head: _Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes:
        length = _content_length(head, self.limits.max_body_bytes)
        if length and head.headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return await reader.readexactly(length) if length else b""

    async def _answer(self, request: Request) -> Response:
        if self._inline:
            return self._respond(request)
        if self._quick is not None:
            try:
                quick = self._quick(request)
            except HttpError as exc:
                return _error_response(exc)
            except Exception:
                self.stats.handler_errors += 1
                log.exception("%s: handler failed on %s %s", self._name, request.method, request.path)
                return Response.json(500, {"error": "internal error"})
            if isinstance(quick, Response):
                return quick
            if quick is not None:
                try:
                    return await quick
                except Exception:
                    self.stats.handler_errors += 1
                    log.exception("%s: handler failed on %s %s", self._name, request.method, request.path)
                    return Response.json(500, {"error": "internal error"})
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._respond, request)

    def _respond(self, request: Request) -> Response:
        """The handler's answer (worker thread); HttpError and any other exception become an answer."""
        try:
            return self._handler(request)
        except HttpError as exc:
            return _error_response(exc)
        except Exception:
            self.stats.handler_errors += 1
            log.exception("%s: handler failed on %s %s", self._name, request.method, request.path)
            return Response.json(500, {"error": "internal error"})

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        if self._ssl is None and writer.transport.get_write_buffer_size() == 0 and not writer.is_closing():
            return  # the kernel took all of it: nothing to wait for, so no deadline (a timer) to set
        try:
            async with asyncio.timeout(self.limits.write_timeout_seconds):
                await writer.drain()
        except TimeoutError:
            self.stats.timeouts += 1
            writer.transport.abort()


async def _linger_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close after the client has our answer: closing with its unread request bytes still queued would
    send a reset that can destroy the answer in flight (a 413 or 503 sent before the body was read)."""
    if writer.is_closing() or reader.at_eof():
        writer.close()
        return
    try:
        writer.write_eof()
        async with asyncio.timeout(_LINGER_SECONDS):
            for _ in range(64):  # at most 4 MiB discarded
                if not await reader.read(65536):
                    break
    except (TimeoutError, ConnectionError, OSError):
        pass
    finally:
        writer.close()


def address_key(host: str) -> str:
    """Whose share a connection from `host` counts against: the address itself, but an IPv6 client's /64
    (one host can use any address of its prefix) and an IPv4-mapped one's IPv4 address."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if not ip.is_loopback:
            return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _release(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _listen(address: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        return socket.create_server((address, port), family=family, backlog=backlog)
    except OSError as exc:
        error = BindError(f"cannot listen on {address}:{port}: {exc.strerror or exc}")
        error.errno, error.strerror = exc.errno, exc.strerror  # for callers that read them off any OSError
        raise error from exc
    except OverflowError as exc:
        raise BindError(f"cannot listen on {address}:{port}: port must be 0-65535") from exc


def _address(writer: asyncio.StreamWriter, which: str) -> tuple[str, int]:
    info = writer.get_extra_info(which)
    if isinstance(info, tuple) and len(info) >= 2:
        return (str(info[0]), int(info[1]))
    return ("", 0)
