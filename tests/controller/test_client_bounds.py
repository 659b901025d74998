"""The controller's listener keeps serving while clients hold connections: slow heads are cut off at the
whole-head deadline, and one address cannot take more than its share (attack #8: 4,200 half-open
connections from one client once held every one of the 4,096)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator

import pytest

from fleetguard.controller.process import MAX_CONNECTIONS_PER_ADDRESS
from tests import raw_http
from tests.controller.helpers import Controller

WAIT_SECONDS = 30.0

FLEET = b"GET /v1/fleet HTTP/1.1\r\nHost: controller\r\nConnection: close\r\n\r\n"


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    yield from raw_http.held_sockets()


def connect(port: int, source: str, held: list[socket.socket]) -> socket.socket:
    return raw_http.connect(port, source, held, WAIT_SECONDS)


def get_fleet(port: int, source: str, held: list[socket.socket]) -> bytes:
    return raw_http.request(
        port,
        source,
        held,
        b"GET /v1/fleet HTTP/1.1\r\nHost: controller\r\nConnection: close\r\n\r\n",
        WAIT_SECONDS,
    )


def poll(condition: Callable[[], bool]) -> bool:
    return raw_http.poll(condition, WAIT_SECONDS, 0.05)


def test_slow_header_clients_hold_connections_while_the_fleet_is_answered(
    controller: Controller, sockets: list[socket.socket]
) -> None:
    port = controller.running.port
    slow = [connect(port, "127.0.0.1", sockets) for _ in range(40)]
    for sock in slow:
        sock.sendall(b"GET /v1/fleet HTTP/1.1\r\nX-")  # and then one byte now and again, never the end
    reply = get_fleet(port, "127.0.0.1", sockets)
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert isinstance(json.loads(reply.partition(b"\r\n\r\n")[2]), dict)  # the fleet document, whole
    for sock in slow:
        sock.sendall(b"a")
    assert all(sock.recv(1) == b"" for sock in slow)  # cut off at the head deadline, not kept by the trickle


def test_one_address_beyond_its_share_is_refused_while_another_is_served(
    controller: Controller, sockets: list[socket.socket]
) -> None:
    port = controller.running.port
    stats = controller.running.server.stats
    for _ in range(MAX_CONNECTIONS_PER_ADDRESS):
        connect(port, "127.0.0.1", sockets)  # half-open: connected, nothing sent
    assert poll(lambda: stats.connections_accepted >= MAX_CONNECTIONS_PER_ADDRESS)
    refused = get_fleet(port, "127.0.0.1", sockets)
    assert refused.startswith(b"HTTP/1.1 503 ") and b"too many connections from this address" in refused
    assert b"\r\nRetry-After: 1\r\n" in refused  # the shippers come back in a second, not at once
    assert get_fleet(port, "127.0.0.2", sockets).startswith(b"HTTP/1.1 200 ")
