"""The agent's shipper through NATS JetStream: publishes each spooled batch to fleetguard.<pool>.<host> and
deletes it from the spool only once JetStream acknowledged storing it (docs/scale-out.md).

The message id is host/boot_id/seq, so a batch published again (its ack was lost, the agent restarted with
it still spooled) inside the stream's duplicate window is dropped by the server, and after it by the
controller's ledger. Order and backoff are the HTTP shipper's (fleetguard.shipping.drain): the newest batch
first when one is new, then the backlog oldest first; failures back off exponentially with equal jitter. A
batch too large for the server's max_payload can never be published: it is dropped and counted, like a 413
over HTTP.

Commands back to hosts travel only in HTTP ingest replies; a host on NATS gets none (its local actions
still run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import threading
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.drain import Drain
from fleetguard.shipping.errors import ShippingError
from fleetguard.shipping.nats_connect import NatsLogin, NatsSettingsError, connect, make_login
from fleetguard.shipping.nats_subjects import MSG_ID_HEADER, msg_id, subject_for
from fleetguard.shipping.shipper import ShipperStats
from fleetguard.shipping.spool import Spool, SpoolRecord

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js.client import JetStreamContext

    from fleetguard.config import Config

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT_SECONDS = 10.0
IDLE_WAIT_SECONDS = 1.0
# The wire format writes v, host, boot_id, seq first (fleetguard.shipping.wire); this much text holds them.
_KEY_PREFIX_BYTES = 2048
_KEY = re.compile(rb'^\{"v":1,"host":("(?:[^"\\]|\\.)*"),"boot_id":("(?:[^"\\]|\\.)*"),"seq":(\d+)[,}]')


def batch_key(body: bytes) -> tuple[str, str, int]:
    """(host, boot_id, seq) of a spooled batch, read from the start of its compressed body."""
    try:
        head = zlib.decompressobj(wbits=31).decompress(body, _KEY_PREFIX_BYTES)
    except zlib.error as exc:
        raise ValueError(f"not gzip: {exc}") from exc
    match = _KEY.match(head)
    if match is None:
        raise ValueError("not a wire-format batch")
    return json.loads(match[1]), json.loads(match[2]), int(match[3])


class NatsShipper:
    """Same face as fleetguard.shipping.shipper.Shipper (wake, start, stop, stats) over JetStream."""

    def __init__(
        self,
        spool: Spool,
        login: NatsLogin,
        pool: str,
        host: str,
        *,
        channel: CommandChannel | None = None,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.spool = spool
        self.login = login
        self.subject = subject_for(pool, host)
        self.host = host
        self.channel = channel
        self.clock = clock
        self.stats = ShipperStats()
        self.connected = False
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self.drain = Drain(spool, self._rng)

    # ---- from other threads ---------------------------------------------------------------------------

    def wake(self) -> None:
        loop, event = self._loop, self._wake
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-nats-shipper", daemon=True)
        self._thread.start()

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop; with `drain_seconds`, first try that long to publish what is spooled (shutdown)."""
        if drain_seconds > 0 and self._thread is not None:
            deadline = self.clock() + drain_seconds
            while self.spool.pending() and self.clock() < deadline and self.drain.failures == 0:
                self.wake()
                self._stop.wait(0.05)
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=PUBLISH_TIMEOUT_SECONDS + 10)

    # ---- the shipper's own thread ---------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        try:
            while not self._stop.is_set():
                delay = await self._step()
                if delay > 0 and not self._stop.is_set():
                    await self._sleep(delay)
        finally:
            await self._disconnect()

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _step(self) -> float:
        if self._js is None:
            try:
                self._nc = await connect(
                    self.login,
                    f"fleetguard-agent {self.host}",
                    on_error=self._error,
                    while_down="batches stay spooled until it is back",
                )
                self._js = self._nc.jetstream()
                self.connected = True
                log.info("connected to NATS %s", self._nc.connected_url)
            except Exception as exc:  # nats-py raises several unrelated types for "no server"
                first = self.stats.errors == 0  # else said already (here or in _error)
                self.stats.errors += 1
                if first:
                    log.warning("NATS %s unreachable (%s); batches stay spooled", self.login.urls, exc)
                return self.drain.failed()
        record = self.drain.next_record()
        if record is None:
            return IDLE_WAIT_SECONDS
        return await self.send(record)

    async def _error(self, exc: Exception) -> None:
        # Permission violations and the like; connection failures are logged once by `connect`.
        import nats.errors

        if isinstance(exc, OSError | nats.errors.StaleConnectionError):
            # The first connection is retried inside connect() for ever: say once that it is not there.
            if not self.connected and self.stats.errors == 0:
                log.warning("NATS %s unreachable (%s); batches stay spooled", self.login.urls, exc)
            if not self.connected:
                self.stats.errors += 1
            log.debug("NATS: %s", exc)
        else:
            log.warning("NATS: %s", exc)

    async def send(self, record: SpoolRecord) -> float:
        """Publish one record; return how long to wait before the next."""
        import nats.errors
        import nats.js.errors

        assert self._js is not None
        body = self.spool.read(record)
        if body is None:
            return 0.0
        try:
            host, boot_id, seq = batch_key(body)
        except ValueError as exc:
            log.error("spooled batch %d is unreadable (%s); dropped", record.record_id, exc)
            self.stats.dropped_refused += 1
            self.spool.ack(record.record_id)
            return 0.0
        try:
            ack = await self._js.publish(
                self.subject,
                body,
                timeout=PUBLISH_TIMEOUT_SECONDS,
                headers={MSG_ID_HEADER: msg_id(host, boot_id, seq)},
            )
        except nats.errors.MaxPayloadError as exc:
            log.error("batch %d is larger than the NATS server takes (%s); dropped", record.record_id, exc)
            self.stats.dropped_refused += 1
            self.spool.ack(record.record_id)
            return 0.0
        except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as exc:
            # Not stored, or stored without the ack reaching us: publish again later, same message id.
            self.stats.errors += 1
            if self.drain.failures == 0:
                log.warning(
                    "publishing to NATS failed (%s: %s); batches stay spooled", type(exc).__name__, exc
                )
            return self.drain.unreachable()
        self.stats.sent += 1
        self.stats.committed += 1
        if ack.duplicate:
            self.stats.duplicates += 1
        self.stats.last_success_ts = self.clock()
        self.drain.succeeded()
        self.spool.ack(record.record_id)
        return 0.0

    async def _disconnect(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None:
            try:
                await nc.close()
            except Exception as exc:
                log.debug("closing NATS: %s", exc)


def open_nats_shipper(config: Config, spool: Spool, channel: CommandChannel | None) -> NatsShipper:
    """The shipper for `[agent] transport = "nats"`; ShippingError naming the key if it cannot be built."""
    agent = config.agent
    try:
        login = make_login(
            "agent",
            agent.nats_url,
            agent.nats_user or config.host,
            agent.nats_password_file,
            agent.nats_creds_file,
            inbox_owner=config.host,
        )
    except NatsSettingsError as exc:
        raise ShippingError(str(exc)) from exc
    return NatsShipper(spool, login, agent.pool, config.host, channel=channel, clock=time.monotonic)
