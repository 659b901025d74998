"""Commands to hosts that ship through NATS (docs/scale-out.md): the controller publishes each pending
command of such a host to `fleetguard.<pool>.cmd.<host>` on the pool's command stream, and the host pulls it
from its own durable consumer `cmd-<host>`.

The journal is the HTTP path's: a command stays pending in `host_commands` (and the writer's CommandBook)
until a batch from its host acknowledges it, and the agent records a command id before running it and never
runs a recorded id again (fleetguard.shipping.channel). So a command is published once, and again every
REPUBLISH_SECONDS while it stays pending: the agent may have run it and lost the outcome before it was
shipped (a crash), or the stream's copy aged out while the host was away. The agent's journal answers every
copy after the first with the recorded outcome; the stream keeps at most MAX_PENDING_PER_HOST per host.

Only hosts whose batches this controller has read from NATS get commands here (a host on HTTP shipping gets
them in its ingest replies); the set is bounded like the CommandBook's hosts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetguard.controller.command_queue import MAX_HOSTS_WITH_PENDING, MAX_PENDING_PER_HOST
from fleetguard.shipping.commands import HostCommand
from fleetguard.shipping.nats_connect import add_stream_if_missing
from fleetguard.shipping.nats_subjects import (
    MSG_ID_HEADER,
    SUBJECT_ROOT,
    command_consumer,
    command_stream,
    command_subject,
)

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # how often the pending commands are looked at (a queued command waits at most this)
REPUBLISH_SECONDS = 300.0
PUBLISH_TIMEOUT_SECONDS = 10.0
STREAM_MAX_AGE_SECONDS = 86400.0
STREAM_DUPLICATE_WINDOW_SECONDS = 600.0
CONSUMER_ACK_WAIT_SECONDS = 30.0

PendingCommands = Callable[[], dict[str, list[HostCommand]]]


class CommandPublisher:
    """Publishes the pending commands of the pool's NATS hosts; runs in the NATS consumer's event loop."""

    def __init__(
        self,
        pool: str,
        pending: PendingCommands,
        clock: Callable[[], float] = time.monotonic,
        sent: Callable[[list[str]], None] | None = None,
    ):
        self.pool = pool
        self._pending = pending
        self._sent = sent  # told each command id published (the writer records its deliveries)
        self._clock = clock
        self.nats_hosts: set[str] = set()
        self._published: dict[str, tuple[float, int]] = {}  # pending command id -> (when, copies)
        self._consumers: set[str] = set()  # hosts whose consumer exists, as far as this connection knows
        self._failing: set[str] = set()  # hosts whose last publish failed (said once, not every poll)
        self.published = 0
        self.errors = 0

    def saw(self, host: str) -> None:
        """A batch of `host` came through NATS: it can be sent commands this way."""
        if host in self.nats_hosts or len(self.nats_hosts) < MAX_HOSTS_WITH_PENDING:
            self.nats_hosts.add(host)

    async def run(self, js: JetStreamContext, stop: Callable[[], bool]) -> None:
        """Until `stop()`: publish what is due every POLL_SECONDS. A failure is logged once per run of them
        and retried at the next poll (the commands stay pending)."""
        self._consumers.clear()  # a new connection: the consumers may have been removed meanwhile
        ready = failing = False
        while not stop():
            try:
                if not ready:
                    await ensure_command_stream(js, self.pool)
                    ready = True
                await self.publish_due(js)
                failing = False
            except Exception as exc:  # any NATS failure; the next poll tries again
                self.errors += 1
                if not failing:
                    log.warning("publishing commands to pool %s's hosts failed: %s", self.pool, exc)
                failing = True
            await asyncio.sleep(POLL_SECONDS)

    async def publish_due(self, js: JetStreamContext) -> int:
        now = self._clock()
        pending = self._pending()
        alive = {c.command_id for commands in pending.values() for c in commands}
        for command_id in [c for c in self._published if c not in alive]:
            del self._published[command_id]  # acked: forgotten, so this stays bounded by the pending ones
        sent = 0
        for host, commands in pending.items():
            if host not in self.nats_hosts:
                continue
            try:
                sent += await self._publish_host(js, host, commands, now)
            except Exception as exc:  # this host's consumer or publish failed: the others still go
                self.errors += 1
                if host not in self._failing:
                    log.warning("commands for %s not published over NATS: %s", host[:200], exc)
                self._failing.add(host)
            else:
                self._failing.discard(host)
        return sent

    async def _publish_host(
        self, js: JetStreamContext, host: str, commands: list[HostCommand], now: float
    ) -> int:
        sent = 0
        for command in commands:
            last, copies = self._published.get(command.command_id, (None, 0))
            if last is not None and now - last < REPUBLISH_SECONDS:
                continue
            if host not in self._consumers:
                await ensure_host_consumer(js, self.pool, host)
                self._consumers.add(host)
            await js.publish(
                command_subject(self.pool, host),
                json.dumps(command.to_json()).encode(),
                timeout=PUBLISH_TIMEOUT_SECONDS,
                stream=command_stream(self.pool),
                # per copy: the stream drops a re-publish of this copy (a lost ack), not the next copy
                headers={MSG_ID_HEADER: f"{command.command_id}/{copies}"},
            )
            self._published[command.command_id] = (now, copies + 1)
            self.published += 1
            sent += 1
            if self._sent is not None:
                self._sent([command.command_id])
        return sent


async def ensure_command_stream(js: JetStreamContext, pool: str) -> None:
    """The pool's command stream, created if missing. Work-queue retention: a command leaves the stream once
    its host's consumer acked it (the host journaled it); one consumer per host, filters never overlap."""
    from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

    name = command_stream(pool)
    await add_stream_if_missing(
        js,
        StreamConfig(
            name=name,
            subjects=[f"{SUBJECT_ROOT}.{pool}.cmd.*"],
            retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.OLD,
            max_msgs_per_subject=MAX_PENDING_PER_HOST,  # the most a host can have pending
            max_age=STREAM_MAX_AGE_SECONDS,
            max_msg_size=64 * 1024,
            storage=StorageType.FILE,
            duplicate_window=STREAM_DUPLICATE_WINDOW_SECONDS,
        ),
    )


async def ensure_host_consumer(js: JetStreamContext, pool: str, host: str) -> None:
    """`host`'s durable pull consumer on the command stream (adding an identical one is a no-op)."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    await js.add_consumer(
        command_stream(pool),
        ConsumerConfig(
            durable_name=command_consumer(host),
            filter_subject=command_subject(pool, host),
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=CONSUMER_ACK_WAIT_SECONDS,
            max_deliver=-1,
        ),
    )
