"""Fuzzing the hardened HTTP server: any bytes on a connection get an HTTP answer or a close, never a crash;
any body given to the JSON parser is a value or a JsonBodyError."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetguard.httpserve import HttpServer, JsonBodyError, Limits, Request, Response, loads_json

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_PIECES = [
    "GET ",
    "POST ",
    "/v1/report",
    "/metrics",
    " HTTP/1.1\r\n",
    " HTTP/1.0\r\n",
    "Content-Length: ",
    "Transfer-Encoding: chunked\r\n",
    "Connection: close\r\n",
    "Expect: 100-continue\r\n",
    "Host: a\r\n",
    "\r\n",
    "99999999999999999999",
    "5",
    "-1",
    ":",
    " ",
    '{"a": [',
    "]}",
    "\x00",
    "é",
]
requests = st.one_of(
    st.binary(max_size=300),
    st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), max_size=14).map(
        lambda parts: "".join(parts).encode("utf-8", "surrogatepass")
    ),
)


def handle(request: Request) -> Response:
    if request.method == "POST":
        return Response.json(200, {"type": type(request.json()).__name__})
    return Response.text(200, "ok")


@pytest.fixture(scope="module")
def server() -> Iterator[HttpServer]:
    srv = HttpServer(handle, "127.0.0.1", 0, Limits(request_timeout_seconds=5.0, max_body_bytes=4096))
    srv.start()
    yield srv
    srv.stop()


@FUZZ
@given(requests)
def test_any_bytes_get_an_http_answer_or_a_close(server: HttpServer, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # the server sees the end of the request at once
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    assert reply == b"" or reply.startswith(b"HTTP/1.1 ")
    assert server.stats.handler_errors == 0
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/still-serving")
    assert conn.getresponse().status == 200
    conn.close()


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=400), st.text(alphabet='[]{}",:0123456789 a\\', max_size=400).map(str.encode)
    )
)
def test_any_json_body_is_a_value_or_a_one_line_error(body: bytes) -> None:
    try:
        loads_json(body, max_depth=8)
    except JsonBodyError as exc:
        assert "\n" not in str(exc)
