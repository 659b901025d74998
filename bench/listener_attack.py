"""Issue 16 attacks #7 and #8 on the listeners, from outside over loopback sockets:

#7 the dashboard: `--slow` clients each sending one request-head byte every 20 s (reconnecting when cut
   off), while an honest client asks `GET /` once a second.
#8 the controller: `--half-open` connections from 127.0.0.1 that never send a byte (reconnected when
   closed), while honest clients ask `GET /v1/fleet` once a second from 127.0.0.2 and from 127.0.0.1.

Each row counts the honest answers by status over `--seconds`. Usage:
python bench/listener_attack.py [--seconds 30] [--slow 40] [--half-open 4200]
The "before", against an older tree: git archive d950343 fleetguard collectors straggler diagnosis
predictor dashboard | tar -x -C /tmp/fg_old && FLEETGUARD_BENCH_TREE=/tmp/fg_old python
bench/listener_attack.py"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.environ.get("FLEETGUARD_BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

from dashboard.server import serve_dashboard
from fleetguard.config import load_config
from fleetguard.controller.process import start_controller
from fleetguard.controller.tokens import Role, add_token
from fleetguard.store import Store


class Holders:
    """`count` connections from `source` to `port` kept open by one thread: each sends `drip` (if any)
    every `every` seconds; one the server closes (or answers) is opened again at once."""

    def __init__(self, port: int, source: str, count: int, drip: bytes, every: float) -> None:
        self.port, self.source, self.drip, self.every = port, source, drip, every
        self.selector = selectors.DefaultSelector()
        self.reconnects = 0
        self.stop = threading.Event()
        for _ in range(count):
            self._open()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self) -> None:
        sock = socket.socket()
        sock.bind((self.source, 0))
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", self.port))
        self.selector.register(sock, selectors.EVENT_READ)

    def _run(self) -> None:
        next_drip = time.monotonic() + self.every
        while not self.stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data or data.startswith(b"HTTP/"):
                    self.selector.unregister(sock)
                    sock.close()
                    self.reconnects += 1
                    self._open()
            if self.drip and time.monotonic() >= next_drip:
                next_drip += self.every
                for key in list(self.selector.get_map().values()):
                    assert isinstance(key.fileobj, socket.socket)
                    with contextlib.suppress(OSError):  # closed meanwhile: reopened on its next read
                        key.fileobj.send(self.drip)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for key in list(self.selector.get_map().values()):
            assert isinstance(key.fileobj, socket.socket)
            key.fileobj.close()
        self.selector.close()


def ask(port: int, source: str, request: bytes) -> str:
    """The status code of one request (or what went wrong), within 5 s."""
    try:
        with socket.socket() as sock:
            sock.settimeout(5.0)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(request)
            line = sock.recv(64).split(b"\r\n", 1)[0]
            return line.split(b" ")[1].decode() if line.startswith(b"HTTP/") else "closed"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return type(exc).__name__


def honest(seconds: float, probes: dict[str, Callable[[], str]]) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = {name: collections.Counter() for name in probes}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        for name, probe in probes.items():
            counts[name][probe()] += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return counts


def row(attack: str, counts: dict[str, collections.Counter[str]], holders: Holders) -> None:
    for name, count in counts.items():
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(count.items()))
        print(f"| {attack} | {name} | {shown} | attacker reconnects {holders.reconnects} |", flush=True)


def attack_dashboard(root: Path, seconds: float, slow: int) -> None:
    store = Store.open(root / "dash.duckdb")
    server = serve_dashboard(store, load_config(env={}), port=0)
    holders = Holders(server.port, "127.0.0.1", slow, b"X", 20.0)
    try:
        time.sleep(1.0)
        get = b"GET / HTTP/1.1\r\nHost: dashboard\r\nConnection: close\r\n\r\n"
        counts = honest(seconds, {"GET / from 127.0.0.1": lambda: ask(server.port, "127.0.0.1", get)})
        row(f"#7 dashboard, {slow} slow-head clients", counts, holders)
    finally:
        holders.close()
        server.close()
        store.close()


def attack_controller(root: Path, seconds: float, half_open: int) -> None:
    tokens = root / "tokens.json"
    add_token(tokens, "*", Role.OPERATOR)
    overrides = {
        "store.path": str(root / "controller.duckdb"),
        "controller.listen": "127.0.0.1:0",
        "controller.tokens_file": str(tokens),
        "dashboard.enabled": False,
    }
    running = start_controller(load_config(env={}, overrides=overrides))
    holders = Holders(running.port, "127.0.0.1", half_open, b"", 0.0)
    try:
        time.sleep(2.0)
        get = b"GET /v1/fleet HTTP/1.1\r\nHost: controller\r\nConnection: close\r\n\r\n"
        probes = {
            "GET /v1/fleet from 127.0.0.2": lambda: ask(running.port, "127.0.0.2", get),
            "GET /v1/fleet from 127.0.0.1": lambda: ask(running.port, "127.0.0.1", get),
        }
        row(f"#8 controller, {half_open} half-open from 127.0.0.1", honest(seconds, probes), holders)
    finally:
        holders.close()
        running.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--slow", type=int, default=40)
    parser.add_argument("--half-open", type=int, default=4200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fg-listener-attack-") as tmp:
        attack_dashboard(Path(tmp), args.seconds, args.slow)
        attack_controller(Path(tmp), args.seconds, args.half_open)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
