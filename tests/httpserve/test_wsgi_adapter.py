"""fleetguard.wsgi_adapter: a WSGI app served by httpserve over real loopback sockets."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable, Iterator
from wsgiref.types import StartResponse, WSGIEnvironment

import pytest

from fleetguard.httpserve import HttpServer
from fleetguard.wsgi_adapter import wsgi_handler


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    if environ["PATH_INFO"] == "/boom":
        raise RuntimeError("app bug")
    if environ["PATH_INFO"] == "/bad-header":
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Evil", "a\r\nSet-Cookie: x=1")])
        return [b"kept"]
    seen = {
        "method": environ["REQUEST_METHOD"],
        "path": environ["PATH_INFO"],
        "query": environ["QUERY_STRING"],
        "type": environ.get("CONTENT_TYPE"),
        "length": environ.get("CONTENT_LENGTH"),
        "body": environ["wsgi.input"].read().decode(),
        "custom": environ.get("HTTP_X_CUSTOM"),
        "remote": environ["REMOTE_ADDR"],
    }
    write = start_response("201 Created", [("Content-Type", "application/json"), ("Content-Length", "999")])
    write(b"")  # the legacy write() callable is honoured
    return [json.dumps(seen).encode()[:10], json.dumps(seen).encode()[10:]]


@pytest.fixture
def server() -> Iterator[HttpServer]:
    served = HttpServer(wsgi_handler(app), "127.0.0.1", 0)
    served.start()
    yield served
    served.stop()


def request(
    server: HttpServer, method: str, target: str, body: bytes = b"", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, target, body=body or None, headers=headers)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def test_the_app_sees_the_request_as_pep_3333_describes_it(server: HttpServer) -> None:
    status, headers, body = request(
        server,
        "POST",
        "/caf%C3%A9/x?a=1&b=%20",
        b"hello",
        **{"Content-Type": "text/plain", "X-Custom": "yes"},
    )
    assert status == 201
    assert headers["Content-Length"] == str(len(body))  # the server's framing, not the app's claim of 999
    seen = json.loads(body)
    assert seen == {
        "method": "POST",
        "path": "/caf\u00c3\u00a9/x",  # the percent-decoded UTF-8 bytes as latin-1 text
        "query": "a=1&b=%20",
        "type": "text/plain",
        "length": "5",
        "body": "hello",
        "custom": "yes",
        "remote": "127.0.0.1",
    }


def test_a_header_that_would_split_the_response_is_dropped(server: HttpServer) -> None:
    status, headers, body = request(server, "GET", "/bad-header")
    assert (status, body) == (200, b"kept")
    assert "X-Evil" not in headers and "Set-Cookie" not in headers


def test_an_app_exception_is_a_500_and_the_server_goes_on(server: HttpServer) -> None:
    assert request(server, "GET", "/boom")[0] == 500
    assert server.stats.handler_errors == 1
    assert request(server, "GET", "/fine")[0] == 201


def test_head_answers_the_length_without_the_body(server: HttpServer) -> None:
    status, headers, body = request(server, "HEAD", "/x")
    assert status == 201 and body == b"" and int(headers["Content-Length"]) > 0
