"""An edge process: `python -m fleetguard.controller.edge_worker FD` reads request frames (edge_wire) on the
Unix socket FD, checks each body exactly as the in-process edge does (`validate.parse_batch`: gunzip with its
bound, typed decode, every check) and answers the checked batch or the refusal. One request at a time; it
exits when the controller closes its end (or dies: its end closes with it)."""

from __future__ import annotations

import gc
import socket
import sys

from fleetguard.controller.edge_wire import (
    HEADER,
    INTERNAL,
    MAX_FRAME_BYTES,
    decode_request,
    encode_batch,
    encode_refusal,
)
from fleetguard.controller.validate import BatchRefused, parse_batch


def read_frame(sock: socket.socket) -> bytes | None:
    """One frame, or None at the end of the stream."""
    head = _read_exactly(sock, HEADER.size)
    if head is None:
        return None
    (length,) = HEADER.unpack(head)
    if length > MAX_FRAME_BYTES:
        raise ValueError(f"a frame of {length} bytes")
    body = _read_exactly(sock, length)
    if body is None:
        raise ValueError("the stream ended inside a frame")
    return body


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            return None
        got += k
    return bytes(buf)


def write_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(HEADER.pack(len(payload)) + payload)


def answer(frame: bytes) -> bytes:
    """The reply to one request frame (never raises for what a body holds)."""
    try:
        request = decode_request(frame)
        batch = parse_batch(request.body, request.host, compressed=request.compressed, now=request.now)
    except BatchRefused as exc:
        return encode_refusal(exc.reason.value, exc.message)
    except Exception as exc:  # the in-process edge would raise it to the server too: answered 500
        return encode_refusal(INTERNAL, f"{type(exc).__name__}: {exc}")
    return encode_batch(batch)


def serve(sock: socket.socket) -> None:
    while True:
        frame = read_frame(sock)
        if frame is None:
            return
        write_frame(sock, answer(frame))


def main(argv: list[str]) -> int:
    # The controller's collector settings: each body makes many small containers, none outlives its reply.
    gc.set_threshold(20_000, 20, 20)
    gc.freeze()
    sock = socket.socket(fileno=int(argv[0]))
    try:
        serve(sock)
    except (OSError, ValueError):
        return 1  # the controller went away or wrote garbage: it starts another
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
