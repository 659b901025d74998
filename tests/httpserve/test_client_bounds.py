"""Per-client bounds of fleetguard.httpserve over real loopback sockets: a whole-head deadline that a
trickling client cannot stretch, and a per-address share of the connections."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest

from fleetguard.httpserve import HttpServer, Limits, Request, Response, address_key
from tests import raw_http

WAIT_SECONDS = 30.0  # generous: the suite runs on a loaded 2-core machine


def ok(request: Request) -> Response:
    return Response.text(200, f"ok {request.path}")


@pytest.fixture
def serve() -> Iterator[Callable[[Limits], HttpServer]]:
    servers: list[HttpServer] = []

    def make(limits: Limits) -> HttpServer:
        server = HttpServer(ok, "127.0.0.1", 0, limits)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    yield from raw_http.held_sockets()


def connect(port: int, source: str, held: list[socket.socket]) -> socket.socket:
    return raw_http.connect(port, source, held, WAIT_SECONDS)


def get(port: int, source: str, held: list[socket.socket]) -> bytes:
    return raw_http.request(port, source, held, b"GET /v1/fleet HTTP/1.0\r\n\r\n", WAIT_SECONDS)


def poll(condition: Callable[[], bool]) -> bool:
    return raw_http.poll(condition, WAIT_SECONDS, 0.02)


def test_a_head_trickled_a_byte_at_a_time_is_cut_off_at_the_head_deadline(
    serve: Callable[[Limits], HttpServer], sockets: list[socket.socket]
) -> None:
    server = serve(Limits(head_timeout_seconds=1.0, request_timeout_seconds=30.0, idle_timeout_seconds=30.0))
    sock = connect(server.port, "127.0.0.1", sockets)
    head = b"GET / HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 200  # never ends: one byte each 50 ms is 10 s
    sent = 0
    try:
        for byte in head:
            sock.sendall(bytes([byte]))
            sent += 1
            time.sleep(0.05)  # the scenario: a client that sends its head one byte at a time
    except OSError:
        pass  # closed by the server: the write after its close is refused
    assert sent < len(head)  # each byte came well within any per-byte timeout, yet the head's deadline held
    assert poll(lambda: server.stats.timeouts == 1)


def test_an_address_beyond_its_share_is_answered_503_while_another_address_is_served(
    serve: Callable[[Limits], HttpServer], sockets: list[socket.socket]
) -> None:
    server = serve(Limits(max_connections=64, max_connections_per_address=8, head_timeout_seconds=30.0))
    for _ in range(8):
        connect(server.port, "127.0.0.2", sockets)  # half-open: connected, nothing sent
    assert poll(lambda: server.stats.connections_accepted == 8)
    assert get(server.port, "127.0.0.2", sockets).startswith(b"HTTP/1.1 503 ")
    assert server.stats.connections_refused == 1
    assert get(server.port, "127.0.0.3", sockets).startswith(b"HTTP/1.1 200 ")
    for sock in sockets[:8]:
        sock.close()
    assert poll(lambda: get(server.port, "127.0.0.2", sockets).startswith(b"HTTP/1.1 200 "))  # share back


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("10.1.2.3", "10.1.2.3"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),  # any address of a /64 is one client
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("::1", "::1"),
        ("fe80::1%eth0", "fe80::/64"),
        ("not an address", "not an address"),
    ],
)
def test_the_share_a_client_counts_against(host: str, key: str) -> None:
    assert address_key(host) == key
