"""The shipper thread: sends spooled batches to the controller, deletes them once committed.

Order: the newest batch first whenever one is new since the last send (live data is never stuck behind a
backlog), otherwise the oldest (the backlog drains between live batches). Failures back off exponentially
with equal jitter (capped). Both as for the NATS shipper: fleetguard.shipping.drain. 429/503 honour
Retry-After; a batch the controller refuses for its content (400/413) is dropped and counted, since sending
it again cannot succeed; 401/403 keep everything and retry slowly (a token problem must not lose data).
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import command_from_json
from fleetguard.shipping.drain import Drain
from fleetguard.shipping.spool import Spool, SpoolRecord
from fleetguard.shipping.wire import CONTENT_ENCODING, CONTENT_TYPE

log = logging.getLogger(__name__)

AUTH_RETRY_SECONDS = 30.0
REQUEST_TIMEOUT_SECONDS = 30.0
MAX_REPLY_BYTES = 1 << 20


@dataclass
class ShipperStats:
    sent: int = 0
    committed: int = 0
    duplicates: int = 0
    refused: dict[int, int] = field(default_factory=dict)  # by HTTP status
    dropped_refused: int = 0  # batches the controller refused for their content: deleted
    errors: int = 0  # no answer (connection refused, timeout)
    bad_commands: int = 0
    last_success_ts: float = 0.0


class Shipper:
    def __init__(
        self,
        spool: Spool,
        url: str,
        token: str,
        *,
        channel: CommandChannel | None = None,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"controller URL {url!r}: expected http(s)://HOST[:PORT]")
        self.spool = spool
        self._parsed = parsed
        self._path = (parsed.path.rstrip("/") or "") + "/v1/ingest"
        self._token = token
        self.channel = channel
        self.clock = clock
        self.stats = ShipperStats()
        self._rng = rng or random.Random()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: http.client.HTTPConnection | None = None
        self.drain = Drain(spool, self._rng)

    def wake(self) -> None:
        """A new batch is in the spool."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-shipper", daemon=True)
        self._thread.start()

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop; with `drain_seconds`, first try that long to send what is spooled (shutdown)."""
        if drain_seconds > 0 and self._thread is not None:
            deadline = self.clock() + drain_seconds
            while self.spool.pending() and self.clock() < deadline and self.drain.failures == 0:
                self._wake.set()
                self._stop.wait(0.05)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=REQUEST_TIMEOUT_SECONDS + 5)
        self._close()

    def _run(self) -> None:
        while not self._stop.is_set():
            record = self.drain.next_record()
            if record is None:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            try:
                delay = self.send(record)
            except Exception:  # a bug must not end shipping: the batch stays spooled, tried again later
                log.exception("shipping batch %d failed", record.record_id)
                self._close()
                delay = self.drain.failed()
            if delay > 0:
                self._stop.wait(delay)

    def send(self, record: SpoolRecord) -> float:
        """Send one record; return how long to wait before the next send."""
        body = self.spool.read(record)
        if body is None:
            return 0.0
        try:
            status, headers, reply = self._post(body)
        except (OSError, http.client.HTTPException) as exc:
            self._close()
            self.stats.errors += 1
            if self.drain.failures == 0:
                log.warning("controller %s unreachable (%s); batches stay spooled", self._parsed.netloc, exc)
            return self.drain.unreachable()
        self.stats.sent += 1
        if status == 200:
            self._committed(record, reply)
            return 0.0
        self.stats.refused[status] = self.stats.refused.get(status, 0) + 1
        if status in (400, 413):
            log.error(
                "controller refused batch %d for good (%d: %s); dropped",
                record.record_id,
                status,
                reply[:200],
            )
            self.stats.dropped_refused += 1
            self.spool.ack(record.record_id)
            return 0.0
        if status in (401, 403):
            log.error(
                "controller refused this agent's token (%d: %s); retrying in %.0f s",
                status,
                reply[:200],
                AUTH_RETRY_SECONDS,
            )
            return AUTH_RETRY_SECONDS * (0.5 + self._rng.random())
        if status in (429, 503):
            return self._retry_after(headers.get("retry-after"))
        return self.drain.failed()

    def _committed(self, record: SpoolRecord, reply: bytes) -> None:
        self.drain.succeeded()
        self.spool.ack(record.record_id)
        self.stats.committed += 1
        self.stats.last_success_ts = self.clock()
        try:
            doc = json.loads(reply)
        except ValueError:
            return
        if isinstance(doc, dict) and doc.get("duplicate"):
            self.stats.duplicates += 1
        commands = doc.get("commands", []) if isinstance(doc, dict) else []
        if self.channel is None or not isinstance(commands, list):
            return
        good = []
        for raw in commands[:64]:
            try:
                good.append(command_from_json(raw))
            except ValueError as exc:
                self.stats.bad_commands += 1
                log.warning("ignored a command from the controller: %s", exc)
        if good:
            self.channel.deliver(good)

    def _retry_after(self, value: str | None) -> float:
        try:
            seconds = float(value) if value is not None else 1.0
        except ValueError:
            seconds = 1.0
        seconds = min(max(seconds, 0.1), 60.0)
        return seconds * (1.0 + 0.5 * self._rng.random())

    # ---- HTTP -----------------------------------------------------------------------------------------

    def _post(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        conn = self._connection()
        conn.request(
            "POST",
            self._path,
            body=body,
            headers={
                "Content-Type": CONTENT_TYPE,
                "Content-Encoding": CONTENT_ENCODING,
                "Authorization": f"Bearer {self._token}",
            },
        )
        response = conn.getresponse()
        reply = response.read(MAX_REPLY_BYTES)
        headers = {k.lower(): v for k, v in response.getheaders()}
        if response.will_close:
            self._close()
        return response.status, headers, reply

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = self._parsed.hostname or "", self._parsed.port
            if self._parsed.scheme == "https":
                self._conn = http.client.HTTPSConnection(host, port, timeout=REQUEST_TIMEOUT_SECONDS)
            else:
                self._conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_SECONDS)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
