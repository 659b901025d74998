"""A WSGI application as an `httpserve` handler, so a WSGI app (the Dash dashboard) is served by the
project's own hardened server: connections are read on its asyncio loop under its per-client bounds, and
only complete requests reach the app, on the server's bounded worker pool.

The whole response is collected before it is sent (httpserve writes one Content-Length answer): fine for
the dashboard's pages, assets and callback answers, not for streaming."""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Final
from urllib.parse import unquote_to_bytes
from wsgiref.types import WSGIApplication, WSGIEnvironment

from fleetguard.httpserve import Handler, Request, Response

log = logging.getLogger(__name__)

# Framing is httpserve's: the app's own values for these would contradict or duplicate it.
_FRAMING: Final = frozenset(
    {"content-length", "content-type", "connection", "transfer-encoding", "keep-alive"}
)
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_DEFAULT_TYPE: Final = "application/octet-stream"

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


def environ_for(request: Request, url_scheme: str = "http") -> WSGIEnvironment:
    """The PEP 3333 environ of one request."""
    server_host, server_port = request.connection.local
    client_host, client_port = request.connection.peer
    environ: WSGIEnvironment = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        # PEP 3333: the percent-decoded bytes as latin-1 text; the framework decodes them as UTF-8
        "PATH_INFO": unquote_to_bytes(request.path).decode("latin-1"),
        "QUERY_STRING": request.query,
        "SERVER_NAME": server_host,
        "SERVER_PORT": str(server_port),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": client_host,
        "REMOTE_PORT": str(client_port),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url_scheme,
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for name, value in request.headers.items():
        if "_" in name:
            continue  # X-A_B and X-A-B would both be HTTP_X_A_B: drop the ambiguous spelling
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value
        else:
            environ[f"HTTP_{key}"] = value
    environ.setdefault("CONTENT_LENGTH", str(len(request.body)))
    return environ


def wsgi_handler(app: WSGIApplication, url_scheme: str = "http") -> Handler:
    """An httpserve handler that runs `app` for each request (on the server's worker threads)."""

    def handle(request: Request) -> Response:
        started: list[tuple[str, list[tuple[str, str]]]] = []
        chunks: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: _ExcInfo | None = None
        ) -> Callable[[bytes], object]:
            if exc_info is not None and exc_info[1] is not None and started:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [(status, headers)]
            return chunks.append

        result: Iterable[bytes] = app(environ_for(request, url_scheme), start_response)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if callable(close):
                close()
        if not started:
            raise RuntimeError("the WSGI app returned without calling start_response")
        return response_of(*started[0], b"".join(chunks))

    return handle


def response_of(status: str, headers: list[tuple[str, str]], body: bytes) -> Response:
    """An httpserve Response from a WSGI status line and headers; a header that would break the answer
    (a line break in its value, a bad name) is dropped and logged, never sent."""
    code = int(status.split(" ", 1)[0])
    content_type = _DEFAULT_TYPE
    kept: list[tuple[str, str]] = []
    for name, value in headers:
        if not _HEADER_NAME.fullmatch(name) or "\r" in value or "\n" in value:
            log.warning("WSGI response header %r dropped: it would break the response", name)
            continue
        lowered = name.lower()
        if lowered == "content-type":
            content_type = value
        elif lowered not in _FRAMING:
            kept.append((name, value))
    return Response(code, body, content_type, tuple(kept))
