"""The dashboard's listener (the Dash app behind fleetguard.httpserve) over real loopback sockets: slow
clients and one client's many connections do not stop others from getting pages (attack #7: 40 clients
sending a header byte every 20 s once held all 32 of Werkzeug's slots)."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from dashboard.server import DASHBOARD_LIMITS, MAX_CONNECTIONS_PER_ADDRESS, DashboardServer, serve_dashboard
from fleetguard.config import load_config
from fleetguard.httpserve import Limits
from fleetguard.store import Store
from tests import raw_http
from tests.dashboard.fleet_store import BuiltFleet

WAIT_SECONDS = 60.0  # generous: the suite runs on a loaded 2-core machine
Serve = Callable[[Limits], DashboardServer]


@pytest.fixture
def serve(fleet: BuiltFleet) -> Iterator[Serve]:
    opened: list[tuple[Store, DashboardServer]] = []

    def make(limits: Limits) -> DashboardServer:
        store = Store.open(fleet.path, read_only=True)
        server = serve_dashboard(store, load_config(env={}), port=0, now=lambda: fleet.end_ts, limits=limits)
        opened.append((store, server))
        return server

    yield make
    for store, server in opened:
        server.close()
        store.close()


ROOT = b"GET / HTTP/1.1\r\nHost: dashboard\r\nConnection: close\r\n\r\n"


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    yield from raw_http.held_sockets()


def connect(port: int, source: str, held: list[socket.socket]) -> socket.socket:
    return raw_http.connect(port, source, held, WAIT_SECONDS)


def get_root(port: int, source: str, held: list[socket.socket]) -> bytes:
    return raw_http.request(
        port, source, held, b"GET / HTTP/1.1\r\nHost: dashboard\r\nConnection: close\r\n\r\n", WAIT_SECONDS
    )


def test_slow_header_clients_do_not_keep_the_page_from_others_and_are_cut_off(
    serve: Serve, sockets: list[socket.socket]
) -> None:
    server = serve(dataclasses.replace(DASHBOARD_LIMITS, head_timeout_seconds=2.0))
    slow = [connect(server.port, "127.0.0.1", sockets) for _ in range(40)]
    for sock in slow:
        sock.sendall(b"GET / HTTP/1.1\r\nX")
    page = get_root(server.port, "127.0.0.1", sockets)
    head, _, body = page.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"X-Frame-Options: DENY" in head
    assert b"_dash-config" in body  # Dash's page, whole
    for sock in slow:  # a byte now and again does not extend the head's deadline
        time.sleep(0.01)
        with contextlib.suppress(OSError):  # already cut off
            sock.sendall(b"a")
    assert all(sock.recv(1) == b"" for sock in slow)
    assert server.server.stats.timeouts >= 40


def test_one_address_beyond_its_share_is_answered_503_while_another_gets_the_page(
    serve: Serve, sockets: list[socket.socket]
) -> None:
    server = serve(DASHBOARD_LIMITS)
    held = [connect(server.port, "127.0.0.2", sockets) for _ in range(MAX_CONNECTIONS_PER_ADDRESS)]
    deadline = time.monotonic() + WAIT_SECONDS
    while server.server.stats.connections_accepted < MAX_CONNECTIONS_PER_ADDRESS:
        assert time.monotonic() < deadline
        time.sleep(0.05)  # polling a real server's accept loop: it offers no event to wait on
    refused = get_root(server.port, "127.0.0.2", sockets)
    assert refused.startswith(b"HTTP/1.1 503 ") and b"too many connections from this address" in refused
    assert get_root(server.port, "127.0.0.3", sockets).startswith(b"HTTP/1.1 200 ")
    for sock in held:
        sock.close()
    deadline = time.monotonic() + WAIT_SECONDS
    while not get_root(server.port, "127.0.0.2", sockets).startswith(b"HTTP/1.1 200 "):  # the share is back
        assert time.monotonic() < deadline
        time.sleep(0.1)  # polling a real server's accept loop: it offers no event to wait on


def test_a_dash_callback_is_answered_through_the_adapter(serve: Serve, sockets: list[socket.socket]) -> None:
    server = serve(DASHBOARD_LIMITS)
    sock = connect(server.port, "127.0.0.1", sockets)
    sock.sendall(b"GET /_dash-layout HTTP/1.1\r\nHost: dashboard\r\nConnection: close\r\n\r\n")
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Type: application/json" in head
    assert body.startswith(b"{")
