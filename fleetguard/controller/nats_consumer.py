"""Ingest from NATS JetStream (`fleetguard controller --pool P`, docs/scale-out.md).

A durable pull consumer `fleetguard-<pool>` on the stream reads subjects fleetguard.<pool>.*; each message
goes through the same checks as an HTTP ingest body (validate.parse_batch, with the host named by the
subject, which NATS permissions let only that host publish to) and the same writer, and is acked only once
its group is committed. So a controller killed between commit and ack gets the message again, and the
ingest ledger answers "duplicate": stored once. A batch refused for its content is terminated (never
redelivered); a batch the writer cannot take now (queue full, store failing) is nak'ed with a delay. A
message whose Nats-Msg-Id is not its publisher's (subject/boot_id/seq of this batch) is refused: the
stream's duplicate detection spans all subjects, so such an id is one host's try at having another host's
batch dropped as a duplicate.

On the same connection, the pool's hosts get their commands (fleetguard.controller.nats_commands), and the
controller tells them which wire versions it reads (fleetguard.controller.nats_wire): they send version 2
only while it says so.

The stream is created if missing (work-queue retention: a message leaves once acked; discard new when full,
so a full stream pushes back to the agents' spools instead of losing the oldest batches; its size is bounded
by the servers' JetStream storage limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetguard.controller.ingest import IngestWriter, Pending
from fleetguard.controller.journal import JournalEntry
from fleetguard.controller.nats_commands import CommandPublisher
from fleetguard.controller.nats_wire import WireAdvertiser
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.shipping.nats_connect import NatsLogin, add_stream_if_missing, connect, fetch, make_login
from fleetguard.shipping.nats_subjects import (
    MSG_ID_HEADER,
    SUBJECT_ROOT,
    host_from_subject,
    msg_id_is_publishers,
    pool_filter,
)
from fleetguard.shipping.wire_v2 import is_v2

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.api import ConsumerConfig
    from nats.js.client import JetStreamContext

    from fleetguard.config import Config

log = logging.getLogger(__name__)

FETCH_BATCH = 256  # messages per pull; they are committed as one group or a few
FETCH_WAIT_SECONDS = 0.1
MAX_GROUPS_IN_FLIGHT = 8
COMMIT_WAIT_SECONDS = 30.0
ACK_WAIT_SECONDS = 60.0  # JetStream redelivers a message not acked this long after delivery
MAX_ACK_PENDING = 4096
NAK_DELAY_SECONDS = 2.0
WITHDRAW_SECONDS = 5.0  # a clean stop waits this long at most to withdraw the wire advertisement
RECONNECT_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 5.0)
# Stream settings used when the controller creates the stream (an operator may create it beforehand).
DUPLICATE_WINDOW_SECONDS = 600.0
STREAM_MAX_AGE_SECONDS = 7 * 86400.0
STREAM_MAX_MSG_BYTES = 8 << 20
_PERMANENT = {Refusal.MALFORMED, Refusal.INVALID_VALUE, Refusal.TOO_LARGE, Refusal.WRONG_HOST}


@dataclass
class ConsumerStats:
    delivered: int = 0
    acked: int = 0
    redelivered: int = 0  # messages delivered more than once (a controller died before its ack, or a nak)
    terminated: int = 0  # refused for their content: never redelivered
    naked: int = 0  # the writer could not take them now: redelivered after a delay
    wire_v1: int = 0  # messages that passed the checks, by wire version
    wire_v2: int = 0
    connected: bool = False


class NatsConsumer:
    def __init__(
        self,
        login: NatsLogin,
        pool: str,
        stream: str,
        writer: IngestWriter,
        stats: ControllerStats,
        newest_wire: int = 2,
    ):
        self.commands = CommandPublisher(pool, writer.pending_commands, sent=writer.sent_commands)
        self.advertiser = WireAdvertiser(pool, newest_wire)
        self.login = login
        self.pool = pool
        self.stream = stream
        self.durable = f"fleetguard-{pool}"
        self.writer = writer
        self.controller_stats = stats
        self.stats = ConsumerStats()
        stats.extra.append(self.exposition)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nc: Client | None = None

    def exposition(self) -> list[str]:
        """Prometheus text for the controller's /metrics (lag and redeliveries are also NATS's to report)."""
        s = self.stats
        name = "fleetguard_controller_nats_messages_total"
        outcomes = {
            "delivered": s.delivered,
            "acked": s.acked,
            "redelivered": s.redelivered,
            "terminated": s.terminated,
            "naked": s.naked,
        }
        commands = "fleetguard_controller_nats_commands_published_total"
        by_wire = "fleetguard_controller_nats_batches_by_wire_total"
        return [
            f"# HELP {commands} Commands published to this pool's hosts' command subjects.",
            f"# TYPE {commands} counter",
            f'{commands}{{pool="{self.pool}"}} {self.commands.published}',
            f"# HELP {name} JetStream messages of this controller's pool, by what became of them.",
            f"# TYPE {name} counter",
            *(f'{name}{{pool="{self.pool}",outcome="{k}"}} {v}' for k, v in outcomes.items()),
            f"# HELP {by_wire} JetStream messages of this pool that passed the checks, by wire version.",
            f"# TYPE {by_wire} counter",
            f'{by_wire}{{pool="{self.pool}",wire="1"}} {s.wire_v1}',
            f'{by_wire}{{pool="{self.pool}",wire="2"}} {s.wire_v2}',
            "# HELP fleetguard_controller_nats_connected 1 while the pool's consumer is connected.",
            "# TYPE fleetguard_controller_nats_connected gauge",
            f'fleetguard_controller_nats_connected{{pool="{self.pool}"}} {int(self.connected())}',
        ]

    def connected(self) -> bool:
        """Read from the client at scrape time: nats-py reconnects on its own while `fetch` only times out,
        so a flag set once after subscribing stayed 1 with the server gone."""
        nc = self._nc
        return self.stats.connected and nc is not None and bool(nc.is_connected)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-nats-consumer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop pulling; what was pulled and not acked is redelivered to the next consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=COMMIT_WAIT_SECONDS + 10)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                await self._consume()
                attempt = 0
            except Exception as exc:  # any NATS failure: reconnect after a pause
                self.stats.connected = False
                delay = RECONNECT_BACKOFF_SECONDS[min(attempt, len(RECONNECT_BACKOFF_SECONDS) - 1)]
                if attempt == 0:
                    # Some NATS errors carry no text (a timeout): name the error then, never an empty reason.
                    reason = str(exc) or type(exc).__name__
                    log.warning("NATS ingest for pool %s: %s; retrying", self.pool, reason)
                attempt += 1
                await asyncio.sleep(delay)
            finally:
                await self._close()

    async def _close(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None:
            try:
                await nc.close()
            except Exception as exc:
                log.debug("closing NATS: %s", exc)

    async def _consume(self) -> None:
        self._nc = await connect(self.login, f"fleetguard-controller {self.pool}")
        js = self._nc.jetstream()
        await ensure_stream(js, self.stream)
        sub = await js.pull_subscribe(
            pool_filter(self.pool),
            durable=self.durable,
            stream=self.stream,
            config=consumer_config(self.pool),
        )
        self.stats.connected = True
        log.info("ingesting pool %s from NATS stream %s", self.pool, self.stream)
        commands = asyncio.create_task(self.commands.run(js, self._stop.is_set))
        advert = asyncio.create_task(self.advertiser.run(js, self._stop.is_set))
        # Groups waiting for their commit while the next pull goes on (as HTTP workers do): a slow commit
        # does not hold back the pull of what arrived meanwhile, which then joins the next commit.
        in_flight: set[asyncio.Task[None]] = set()
        try:
            while not self._stop.is_set():
                if len(in_flight) >= MAX_GROUPS_IN_FLIGHT:
                    _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                msgs = await fetch(sub, FETCH_BATCH, FETCH_WAIT_SECONDS)
                if not msgs:
                    continue
                in_flight.add(asyncio.create_task(self.handle(msgs)))
                in_flight = {t for t in in_flight if not t.done()}
        finally:
            for task in (commands, advert):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if in_flight:
                await asyncio.wait(in_flight)
            if self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.advertiser.withdraw(js), WITHDRAW_SECONDS)

    async def handle(self, msgs: list[Msg]) -> None:
        """Check, submit and wait for the writer (or its journal); then ack, term or nak each message."""
        checked: list[tuple[Msg, IngestBatch]] = []
        for msg in msgs:
            self.stats.delivered += 1
            if msg.metadata.num_delivered and msg.metadata.num_delivered > 1:
                self.stats.redelivered += 1
            try:
                host = host_from_subject(msg.subject, self.pool)
                if host is None:
                    raise BatchRefused(Refusal.WRONG_HOST, f"subject {msg.subject[:200]!r} names no host")
                batch = parse_batch(msg.data, host, compressed=True, now=time.time())
                self.commands.saw(host)
                mid = msg.headers.get(MSG_ID_HEADER) if msg.headers else None
                if not msg_id_is_publishers(mid, msg.subject, host, batch.boot_id, batch.seq):
                    # Stored, this id would have the stream drop another host's batch as its duplicate.
                    raise BatchRefused(
                        Refusal.WRONG_HOST,
                        f"message id {str(mid)[:200]!r} is not {msg.subject[:200]}'s for this batch",
                    )
                checked.append((msg, batch))
                if is_v2(msg.data):
                    self.stats.wire_v2 += 1
                else:
                    self.stats.wire_v1 += 1
            except BatchRefused as exc:
                await self._refused(msg, exc)
        if self.writer.journal is not None:
            await self._journaled(checked)
            return
        submitted: list[tuple[Msg, Pending]] = []
        for msg, batch in checked:
            try:
                # NATS hosts get their commands from the publisher, not in answers
                submitted.append((msg, self.writer.submit(batch, replies=False)))
            except BatchRefused as exc:
                await self._refused(msg, exc)
        if not submitted:
            return
        deadline = time.monotonic() + COMMIT_WAIT_SECONDS
        await asyncio.to_thread(_wait_all, [p for _, p in submitted], deadline)
        for msg, pending in submitted:
            if not pending.done.is_set():
                await msg.nak(delay=NAK_DELAY_SECONDS)
                self.stats.naked += 1
            elif pending.error is not None:
                await self._refused(msg, pending.error, counted=True)
            else:
                await msg.ack()
                self.stats.acked += 1

    async def _journaled(self, checked: list[tuple[Msg, IngestBatch]]) -> None:
        """Acked once in the controller's journal: one fdatasync for the pull, off the event loop."""
        if not checked:
            return
        now = time.time()
        items = [(batch, JournalEntry(batch.host, msg.data, True, now)) for msg, batch in checked]
        answers = await asyncio.to_thread(self.writer.accept, items, replies=False, hold=False)
        for (msg, _), answer in zip(checked, answers, strict=True):
            if isinstance(answer, BatchRefused):
                await self._refused(msg, answer)
            else:
                await msg.ack()
                self.stats.acked += 1

    async def _refused(self, msg: Msg, exc: BatchRefused, *, counted: bool = False) -> None:
        if not counted:  # the writer counts the refusals it makes
            self.controller_stats.refuse(exc.reason.value)
        if exc.reason in _PERMANENT:
            log.warning("NATS message on %s refused for good: %s", msg.subject[:200], exc.message)
            await msg.term()
            self.stats.terminated += 1  # counted once sent, as acks are
        else:
            await msg.nak(delay=NAK_DELAY_SECONDS)
            self.stats.naked += 1


def _wait_all(pendings: list[Pending], deadline: float) -> None:
    for p in pendings:
        p.done.wait(max(0.0, deadline - time.monotonic()))


def consumer_config(pool: str) -> ConsumerConfig:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    return ConsumerConfig(
        durable_name=f"fleetguard-{pool}",
        filter_subject=pool_filter(pool),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ACK_WAIT_SECONDS,
        max_ack_pending=MAX_ACK_PENDING,
        max_deliver=-1,
    )


async def ensure_stream(js: JetStreamContext, name: str) -> None:
    """Create the stream if it does not exist; an existing one is used as its operator configured it."""
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    await add_stream_if_missing(
        js,
        StreamConfig(
            name=name,
            subjects=[f"{SUBJECT_ROOT}.*.*"],
            retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.NEW,
            max_bytes=-1,  # bounded by the servers' jetstream max_file_store (docs/scale-out.md)
            max_age=STREAM_MAX_AGE_SECONDS,
            max_msg_size=STREAM_MAX_MSG_BYTES,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_SECONDS,
        ),
    )


def start_consumer(config: Config, writer: IngestWriter, stats: ControllerStats) -> NatsConsumer:
    """The consumer for `controller.pool` (NatsSettingsError naming the key if its login is unusable)."""
    ctl = config.controller
    login = make_login("controller", ctl.nats_url, ctl.nats_user, ctl.nats_password_file, ctl.nats_creds_file)
    consumer = NatsConsumer(login, ctl.pool, ctl.nats_stream, writer, stats, ctl.nats_wire)
    consumer.start()
    return consumer
