"""The agent's shipper through NATS JetStream: publishes each spooled batch to fleetguard.<pool>.<host> and
deletes it from the spool only once JetStream acknowledged storing it (docs/scale-out.md).

The message id is subject/boot_id/seq, so a batch published again (its ack was lost, the agent restarted
with it still spooled) is stored once by the controller's ledger. A batch leaves the spool only on an ack
that stored *this* publish: the stream's duplicate detection spans every subject, so a "duplicate" answer
may mean another host published a message under this id first; the batch is then published again under a
random retry id, and the ledger (keyed by the subject's host) keeps it once if the first copy was ours.

The drain loop is the HTTP shipper's (fleetguard.shipping.drain_loop; this module is its NATS transport): the
newest batch first when one is new, then the backlog oldest first; failures back off exponentially with
equal jitter. A batch too large for the server's max_payload can never be published: it is dropped and
counted, like a 413 over HTTP. nats-py is asyncio: the transport runs its own event-loop thread, which the
drain loop's thread waits on for each connect and publish.

Wire version: the shipper reads what the pool's controller says it reads (fleetguard.shipping.wire_advert)
on connecting, every ADVERT_REFRESH_SECONDS and on each reconnect, into the WireChoice the spool buffer
encodes new batches in. Over NATS no answer tells the agent that a controller refused a version-2 body (the
consumer terminates it), so the promise is the only guard: a spooled version-2 batch is published as version
1 whenever the latest read found no promise of version 2.

Commands from the controller: with a command channel, the shipper also pulls this host's durable consumer
`cmd-<host>` on the pool's command stream (fleetguard.controller.nats_commands), hands each command to the
channel (which journals it before it runs, and never runs a journaled id again) and only then acks it to
JetStream; the outcome goes back in a batch, as over HTTP. Until the controller has a command for this host
its consumer does not exist, and the pull is retried every COMMAND_RETRY_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from fleetguard.shipping import wire_advert
from fleetguard.shipping.batch_key import batch_key
from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import command_from_json
from fleetguard.shipping.drain import Drain
from fleetguard.shipping.drain_loop import DrainLoop, ShipperStats
from fleetguard.shipping.errors import BatchRefused, ShippingError, TransportDown
from fleetguard.shipping.nats_connect import (
    FIRST_CONNECT_SECONDS,
    NatsLogin,
    NatsSettingsError,
    connect,
    fetch,
    make_login,
)
from fleetguard.shipping.nats_subjects import (
    MSG_ID_HEADER,
    command_consumer,
    command_stream,
    msg_id,
    subject_for,
)
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire_v2 import WIRE_VERSION_2, WireChoice, is_v2, to_v1

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js.client import JetStreamContext

    from fleetguard.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

PUBLISH_TIMEOUT_SECONDS = 10.0
# The longest wait between failed publishes. Shorter than HTTP's 30 s: what that cap spares is a controller's
# ingest, and JetStream stands between the agents and the controllers here (a server takes a fleet's retries
# by design). A restarted server can answer "no responders" until its JetStream has recovered its streams,
# which can take seconds under load: each of those answers is a failure, and a 30 s cap left the backlog
# waiting up to half a minute after the server was fully back.
NATS_BACKOFF_CAP_SECONDS = 5.0
COMMAND_FETCH = 16
COMMAND_WAIT_SECONDS = 5.0  # a pull waits this long for a command (the next one starts right after)
COMMAND_RETRY_SECONDS = 5.0  # no consumer yet (no command ever queued for this host), or NATS down
MAX_ERRORS_SAID = 64


class NatsTransport:
    """Publishes to JetStream from its own event-loop thread (nats-py is asyncio); the drain loop's thread
    calls `prepare` and `send`, which wait for the loop. Once connected, the same connection pulls this
    host's commands into the channel."""

    def __init__(
        self,
        login: NatsLogin,
        pool: str,
        host: str,
        stats: ShipperStats,
        channel: CommandChannel | None = None,
        wire: WireChoice | None = None,
    ) -> None:
        self.login = login
        self.subject = subject_for(pool, host)
        self.host = host
        self.pool = pool
        self.stats = stats
        self.channel = channel
        self.connected = False
        self.commands_received = 0
        self._said: set[str] = set()  # server errors logged already
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._commands: asyncio.Task[None] | None = None
        # The wire version new batches are encoded in: what the pool's controller says it reads.
        self.wire = wire or WireChoice()
        self.wire_reads = 0  # reads of the controller's advertisement done (whatever they found)
        self._advert = wire_advert.AdvertReader(pool)
        self._wire_watch: asyncio.Task[None] | None = None
        self._read_wire_now: asyncio.Event | None = None
        # Called (on the event loop) when a lost connection is back: the drain loop's backoff ends.
        self.on_back: Callable[[], None] | None = None

    # ---- from the drain loop's thread -----------------------------------------------------------------

    def prepare(self) -> None:
        """Connect unless connected (nats-py then reconnects by itself for ever); on connecting, start
        pulling this host's commands."""
        if self._js is not None:
            return
        try:
            self._call(self._connect(), FIRST_CONNECT_SECONDS + 5)
        except Exception as exc:  # nats-py raises several unrelated types for "no server"
            first = self.stats.errors == 0  # else said already (here or in _error)
            if first:
                log.warning("NATS %s unreachable (%s); batches stay spooled", self.login.urls, exc)
            raise TransportDown(f"NATS {self.login.urls} unreachable ({exc})", said=True) from exc

    def send(self, body: bytes) -> None:
        import nats.errors
        import nats.js.errors

        if self.wire.version != WIRE_VERSION_2 and is_v2(body):
            # Spooled while the controller said it reads version 2; it no longer says so (stopped, replaced,
            # told to): one that cannot read it would terminate it unseen, so it goes as version 1.
            try:
                body = to_v1(body)
            except ValueError as exc:
                raise BatchRefused(f"a spooled batch cannot be read again: {exc}") from None
        try:
            _, boot_id, seq = batch_key(body)
        except ValueError as exc:
            raise BatchRefused(f"it is unreadable ({exc})") from exc
        try:
            self._call(self._publish(body, boot_id, seq), 2 * PUBLISH_TIMEOUT_SECONDS + 5)
        except nats.errors.MaxPayloadError as exc:
            raise BatchRefused(f"it is larger than the NATS server takes ({exc})") from exc
        except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as exc:
            # Not stored, or stored without the ack reaching us: publish again later, same message id.
            raise TransportDown(f"publishing to NATS failed ({type(exc).__name__}: {exc})") from exc
        self.stats.sent += 1

    def close(self) -> None:
        """Disconnect and end the event-loop thread (the next `prepare` starts both again)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._disconnect(), PUBLISH_TIMEOUT_SECONDS)
        except Exception as exc:
            log.debug("closing NATS: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=PUBLISH_TIMEOUT_SECONDS)
        if not thread.is_alive():
            loop.close()
        # Whatever did not close in time belongs to the loop just ended: never reused on the next one.
        self._loop = self._thread = None
        self._nc = self._js = None
        self._commands = self._wire_watch = self._read_wire_now = None
        self.connected = False

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` on the event-loop thread (started if needed) and wait for its result."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="fleetguard-nats-loop", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    # ---- on the event loop ----------------------------------------------------------------------------

    async def _connect(self) -> None:
        self._nc = await connect(
            self.login,
            f"fleetguard-agent {self.host}",
            on_error=self._error,
            while_down="batches stay spooled until it is back",
            on_back=self._back,
        )
        self._js = self._nc.jetstream()
        self.connected = True
        log.info("connected to NATS %s", self._nc.connected_url)
        if self.channel is not None:
            self._commands = asyncio.create_task(self._pull_commands(self._js, self.channel))
        self._read_wire_now = asyncio.Event()
        self._advert.recheck()
        self._wire_watch = asyncio.create_task(self._watch_wire(self._js, self._read_wire_now))

    def _back(self) -> None:
        if self._read_wire_now is not None:  # the controller may have changed while we were away
            self._advert.recheck()
            self._read_wire_now.set()
        if self.on_back is not None:
            self.on_back()

    async def _watch_wire(self, js: JetStreamContext, read_now: asyncio.Event) -> None:
        """The controller's advertisement into the wire choice, now and then every ADVERT_REFRESH_SECONDS
        or at `read_now` (a reconnect). A read that fails (NATS slow or down, no permission to read it)
        keeps what the last read found until the entry it read lapses (`AdvertReader.held`), then is
        version 1: the next read is made by then, and a read that has not answered by then is one that
        failed. Runs until cancelled (at close)."""
        said_failing = False
        while True:
            read_now.clear()
            before = self.wire.version
            wait = wire_advert.ADVERT_REFRESH_SECONDS
            # What failed reads keep is kept no longer than the entry lapses, a read under way included:
            # nats-py waits its whole request timeout (5 s) for an answer that may never come.
            kept = self._advert.held(time.monotonic()) if said_failing else None
            if said_failing and kept is None:
                self.wire.controller_reads(None)  # lapsed: version 1 while the next read is made
            try:
                read = self._advert.read(js)
                versions = await asyncio.wait_for(read, None if kept is None else kept.seconds_left)
                said_failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # nats-py raises several unrelated types
                held = self._advert.held(time.monotonic())
                versions = None
                if held is not None:  # read again by the time what is kept lapses, from the same instant
                    versions, wait = held.versions, min(wait, held.seconds_left)
                if not said_failing:
                    log.info(
                        "cannot read which wire versions the controller reads (%s: %s); %s",
                        type(exc).__name__,
                        exc,
                        "sending version 1"
                        if versions is None
                        else "keeping what it last said until that lapses",
                    )
                said_failing = True
            self.wire.controller_reads(versions)
            self.wire_reads += 1
            if self.wire.version != before:
                log.info(
                    "the controller of pool %s reads %s: sending wire version %d",
                    self.pool,
                    versions or "version 1 only",
                    self.wire.version,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(read_now.wait(), wait)

    async def _publish(self, body: bytes, boot_id: str, seq: int) -> None:
        import nats.js.errors

        assert self._js is not None
        ack = await self._js.publish(
            self.subject,
            body,
            timeout=PUBLISH_TIMEOUT_SECONDS,
            headers={MSG_ID_HEADER: msg_id(self.subject, boot_id, seq)},
        )
        if ack.duplicate:
            # The stream holds a message with this id, but whose? Our own earlier publish whose ack was
            # lost, or another host's forged one (the stream's dedup spans every subject). Either way the
            # batch is not proven stored: publish it again under an id nobody else can know. The
            # controller's ledger, keyed by the subject's host, stores it once if it was ours.
            self.stats.duplicates += 1
            ack = await self._js.publish(
                self.subject,
                body,
                timeout=PUBLISH_TIMEOUT_SECONDS,
                headers={MSG_ID_HEADER: msg_id(self.subject, boot_id, seq, secrets.token_hex(16))},
            )
            if ack.duplicate:
                raise nats.js.errors.Error(description="a fresh message id was answered duplicate")

    async def _pull_commands(self, js: JetStreamContext, channel: CommandChannel) -> None:
        """This host's commands, from its own consumer, into the channel's journal; acked to JetStream only
        once journaled (a crash before the ack redelivers it, and the journal answers it, not run again).
        Runs until cancelled (at close)."""
        sub = None
        failing = False
        while True:
            try:
                if sub is None:
                    sub = await js.pull_subscribe_bind(
                        durable=command_consumer(self.host), stream=command_stream(self.pool)
                    )
                msgs = await fetch(sub, COMMAND_FETCH, COMMAND_WAIT_SECONDS)
                failing = False
                for msg in msgs:
                    try:
                        command = command_from_json(json.loads(msg.data))
                    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError too
                        self.stats.bad_commands += 1
                        log.warning("a command from NATS is unusable (%s); dropped", exc)
                        await msg.term()
                        continue
                    channel.deliver([command])
                    self.commands_received += 1
                    await msg.ack()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no consumer yet, no permission, NATS down: try again later
                if not failing:
                    log.info("no controller commands from NATS for now (%s: %s)", type(exc).__name__, exc)
                failing = True
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()
                    sub = None
                await asyncio.sleep(COMMAND_RETRY_SECONDS)

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
        elif str(exc) in self._said:
            log.debug("NATS: %s", exc)
        else:
            # Each distinct error once: a server whose permissions predate command delivery refuses every
            # command pull (one each COMMAND_WAIT_SECONDS), and the operator needs one line, not a stream.
            if len(self._said) < MAX_ERRORS_SAID:
                self._said.add(str(exc))
            log.warning("NATS: %s", exc)

    async def _disconnect(self) -> None:
        tasks = (self._commands, self._wire_watch)
        self._commands = self._wire_watch = None
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None:
            try:
                await nc.close()
            except Exception as exc:
                log.debug("closing NATS: %s", exc)


class NatsShipper:
    """Same face as fleetguard.shipping.shipper.Shipper (wake, start, stop, stats): the one drain loop
    (fleetguard.shipping.drain_loop) with NatsTransport."""

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
        wire: WireChoice | None = None,
    ) -> None:
        self.spool = spool
        self.channel = channel
        self.stats = ShipperStats()
        self.wire = wire or WireChoice()  # the spool buffer encodes new batches in this version
        self.transport = NatsTransport(login, pool, host, self.stats, channel, self.wire)
        self._loop = DrainLoop(
            spool,
            self.transport,
            self.stats,
            clock=clock,
            rng=rng or random.Random(),
            thread_name="fleetguard-nats-shipper",
            join_seconds=2 * PUBLISH_TIMEOUT_SECONDS + 10,
            backoff_cap_seconds=NATS_BACKOFF_CAP_SECONDS,
        )
        # Back from an outage (a NATS server restarted): publish the backlog now, not after the backoff
        # the outage's failed sends built up (up to 30 s).
        self.transport.on_back = self._loop.resume

    @property
    def drain(self) -> Drain:
        return self._loop.drain

    @property
    def connected(self) -> bool:
        return self.transport.connected

    @property
    def commands_received(self) -> int:
        return self.transport.commands_received

    def wake(self) -> None:
        self._loop.wake()

    def start(self) -> None:
        self._loop.start()

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop; with `drain_seconds`, first try that long to publish what is spooled (shutdown)."""
        self._loop.stop(drain_seconds)


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
