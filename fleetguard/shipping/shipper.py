"""The agent's shipper over HTTP: sends spooled batches to the controller, deletes them once committed.

One drain loop for both shippers (fleetguard.shipping.drain_loop: the newest batch first whenever one is
new, then the backlog oldest first; failures back off exponentially with equal jitter, capped); this module
is its HTTP transport. 429/503 honour Retry-After; a batch the controller refuses for its content (400/413)
is dropped and counted, since sending it again cannot succeed; 401/403 keep everything and retry slowly (a
token problem must not lose data).
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import urllib.parse
from collections.abc import Callable

from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import command_from_json
from fleetguard.shipping.drain import Drain
from fleetguard.shipping.drain_loop import DrainLoop, ShipperStats
from fleetguard.shipping.errors import BatchRefused, RetryLater, SendFailed, TransportDown
from fleetguard.shipping.spool import Spool, SpoolRecord
from fleetguard.shipping.wire import CONTENT_ENCODING, CONTENT_TYPE
from fleetguard.shipping.wire_v2 import CONTENT_TYPE_V2, WireChoice, is_v2, to_v1

__all__ = ["HttpTransport", "Shipper", "ShipperStats"]

log = logging.getLogger(__name__)

AUTH_RETRY_SECONDS = 30.0
REQUEST_TIMEOUT_SECONDS = 30.0
MAX_REPLY_BYTES = 1 << 20


class HttpTransport:
    """POST /v1/ingest to the controller: a batch is stored when the answer is 200. The reply's commands go
    to the command channel."""

    def __init__(
        self,
        url: str,
        token: str,
        stats: ShipperStats,
        rng: random.Random,
        channel: CommandChannel | None = None,
        wire: WireChoice | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"controller URL {url!r}: expected http(s)://HOST[:PORT]")
        self._parsed = parsed
        self._path = (parsed.path.rstrip("/") or "") + "/v1/ingest"
        self._token = token
        self.stats = stats
        self._rng = rng
        self.channel = channel
        # The wire version new batches are encoded in: the controller's replies say which it reads.
        self.wire = wire or WireChoice()
        self._conn: http.client.HTTPConnection | None = None

    def prepare(self) -> None:
        """Nothing to open ahead: a connection is made by the first send."""

    def send(self, body: bytes) -> None:
        v2 = is_v2(body)
        status, headers, reply = self._send(body, v2)
        if status == 400 and v2 and not _refused_a_value(reply):
            # A controller that reads version 1 only (downgraded since it said otherwise) refuses version 2
            # as malformed: the same batch goes again as version 1, and so do the next ones. (One that read
            # it and refused a value in it would refuse the same value in version 1: it is dropped below.)
            log.warning("the controller refused a wire-version-2 batch (%s): sending version 1", reply[:200])
            self.wire.refused_v2()
            try:
                body = to_v1(body)
            except ValueError as exc:
                raise BatchRefused(f"a spooled batch cannot be read again: {exc}") from None
            status, headers, reply = self._send(body, False)
        if status == 200:
            self._committed(reply)
            return
        self.stats.refused[status] = self.stats.refused.get(status, 0) + 1
        if status in (400, 413):
            raise BatchRefused(f"the controller refused it for good ({status}: {reply[:200]!r})")
        if status in (401, 403):
            log.error(
                "controller refused this agent's token (%d: %s); retrying in %.0f s",
                status,
                reply[:200],
                AUTH_RETRY_SECONDS,
            )
            raise RetryLater(f"token refused ({status})", AUTH_RETRY_SECONDS * (0.5 + self._rng.random()))
        if status in (429, 503):
            raise RetryLater(f"controller busy ({status})", self._retry_after(headers.get("retry-after")))
        raise SendFailed(f"controller answered {status}")

    def _send(self, body: bytes, v2: bool) -> tuple[int, dict[str, str], bytes]:
        try:
            status, headers, reply = self._post(body, CONTENT_TYPE_V2 if v2 else CONTENT_TYPE)
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise TransportDown(f"controller {self._parsed.netloc} unreachable ({exc})") from exc
        self.stats.sent += 1
        return status, headers, reply

    def _committed(self, reply: bytes) -> None:
        try:
            doc = json.loads(reply)
        except ValueError:
            return
        if isinstance(doc, dict):
            self.wire.controller_reads(doc.get("wire"))
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

    def _post(self, body: bytes, content_type: str) -> tuple[int, dict[str, str], bytes]:
        conn = self._connection()
        conn.request(
            "POST",
            self._path,
            body=body,
            headers={
                "Content-Type": content_type,
                "Content-Encoding": CONTENT_ENCODING,
                "Authorization": f"Bearer {self._token}",
            },
        )
        response = conn.getresponse()
        reply = response.read(MAX_REPLY_BYTES)
        headers = {k.lower(): v for k, v in response.getheaders()}
        if response.will_close:
            self.close()
        return response.status, headers, reply

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = self._parsed.hostname or "", self._parsed.port
            if self._parsed.scheme == "https":
                self._conn = http.client.HTTPSConnection(host, port, timeout=REQUEST_TIMEOUT_SECONDS)
            else:
                self._conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_SECONDS)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Shipper:
    """The agent's shipper over HTTP: the drain loop (fleetguard.shipping.drain_loop) with HttpTransport."""

    def __init__(
        self,
        spool: Spool,
        url: str,
        token: str,
        *,
        channel: CommandChannel | None = None,
        clock: Callable[[], float],
        rng: random.Random | None = None,
        wire: WireChoice | None = None,
    ) -> None:
        rng = rng or random.Random()
        self.spool = spool
        self.channel = channel
        self.stats = ShipperStats()
        self.wire = wire or WireChoice()  # the spool buffer encodes new batches in this version
        self.transport = HttpTransport(url, token, self.stats, rng, channel, self.wire)
        self._loop = DrainLoop(
            spool,
            self.transport,
            self.stats,
            clock=clock,
            rng=rng,
            thread_name="fleetguard-shipper",
            join_seconds=REQUEST_TIMEOUT_SECONDS + 5,
        )

    @property
    def drain(self) -> Drain:
        return self._loop.drain

    def wake(self) -> None:
        """A new batch is in the spool."""
        self._loop.wake()

    def start(self) -> None:
        self._loop.start()

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop; with `drain_seconds`, first try that long to send what is spooled (shutdown)."""
        self._loop.stop(drain_seconds)

    def send(self, record: SpoolRecord) -> float:
        """Send one record; return how long to wait before the next send."""
        return self._loop.ship(record)


def _refused_a_value(reply: bytes) -> bool:
    """Whether a 400 says the controller read the batch and refused a value in it (it reads version 2)."""
    try:
        doc = json.loads(reply)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("reason") == "invalid_value"
