"""Raw loopback HTTP clients for the listener tests (httpserve, the controller, the dashboard): sockets bound
to a chosen 127.x source address, so a per-address cap can be shown against one client while another is
served, and a fixture-friendly list that closes them all."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator


def held_sockets() -> Iterator[list[socket.socket]]:
    """For a fixture: the list tests append their sockets to, every one closed at teardown."""
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def connect(port: int, source: str, held: list[socket.socket], timeout: float) -> socket.socket:
    sock = socket.socket()
    held.append(sock)
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def request(port: int, source: str, held: list[socket.socket], head: bytes, timeout: float) -> bytes:
    """Send one request head and read the whole answer (the server closes after it)."""
    sock = connect(port, source, held, timeout)
    sock.sendall(head)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def poll(condition: Callable[[], bool], timeout: float, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)  # polling a real server (the caller's condition): it offers no event to wait on
    return condition()
