"""A real webhook receiver on loopback: verifies Standard Webhooks signatures and accepts each webhook-id
once, as a careful receiver does. `answer` decides what each request gets (status, delay)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request, in order
    accepted: dict[str, Any] = field(default_factory=dict)  # webhook-id -> body, first time only
    duplicates: int = 0
    bad_signatures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


Answer = Callable[[int], tuple[int, float, dict[str, str]]]  # request number -> (status, delay s, headers)


def always_ok(_n: int) -> tuple[int, float, dict[str, str]]:
    return 200, 0.0, {}


@contextmanager
def receiver(secret: str | None, answer: Answer = always_ok, port: int = 0) -> Iterator[tuple[str, Received]]:
    received = Received()
    verifier = Webhook(secret) if secret else None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            with received.lock:
                n = len(received.requests)
                received.requests.append({"headers": headers, "body": json.loads(body)})
            status, delay, extra = answer(n)
            if status == 200:
                self._accept(body, headers)
            if delay:
                time.sleep(delay)  # the scenario: a receiver slow to answer
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _accept(self, body: bytes, headers: dict[str, str]) -> None:
            if verifier is not None:
                try:
                    verifier.verify(body, headers)
                except WebhookVerificationError:
                    with received.lock:
                        received.bad_signatures += 1
                    return
            msg_id = headers.get("webhook-id", str(len(received.requests)))
            with received.lock:
                if msg_id in received.accepted:
                    received.duplicates += 1
                else:
                    received.accepted[msg_id] = json.loads(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
