"""The agent's NATS shipper keeps a batch in its spool until JetStream acknowledged it: nothing is deleted
while the server is down or has no stream for the subject; once both are there, the backlog is published."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from fleetguard.controller.nats_consumer import ensure_stream
from fleetguard.shipping.nats_connect import NatsLogin, connect
from fleetguard.shipping.nats_shipper import NatsShipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import encode
from tests.controller.helpers import batch
from tests.scale.natsd import CONTROLLER_USER, NatsServer, require_nats_server, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _stream_messages(server: NatsServer, create: bool) -> int:
    login = NatsLogin([server.url], CONTROLLER_USER, server.passwords[CONTROLLER_USER])
    nc = await connect(login, "test controller")
    try:
        js = nc.jetstream()
        if create:
            await ensure_stream(js, "FLEETGUARD")
        return int((await js.stream_info("FLEETGUARD")).state.messages)
    finally:
        await nc.close()


def test_batches_stay_spooled_until_jetstream_acks_them(tmp_path: Path) -> None:
    require_nats_server()
    spool = Spool(tmp_path / "spool", 1 << 20)
    for seq in (1, 2, 3):
        spool.append(encode(batch("a1", seq)))
    server = NatsServer(tmp_path, {"a1": "red"})
    login = NatsLogin([server.url], "a1", server.passwords["a1"], inbox_prefix="_INBOX.a1")
    shipper = NatsShipper(spool, login, "red", "a1", clock=time.monotonic, rng=random.Random(1))
    shipper.start()
    try:
        wait_for(lambda: shipper.stats.errors >= 1)  # no server yet: connection attempts fail
        assert spool.pending() == 3 and not shipper.connected
        server.start()
        wait_for(lambda: shipper.connected)
        time.sleep(1.5)  # connected, but no stream holds fleetguard.red.*: no ack, nothing deleted
        assert spool.pending() == 3 and shipper.stats.committed == 0
        assert asyncio.run(_stream_messages(server, create=True)) == 0
        wait_for(lambda: spool.pending() == 0)
        assert shipper.stats.committed == 3
        assert asyncio.run(_stream_messages(server, create=False)) == 3
    finally:
        shipper.stop()
        spool.close()
        server.stop()


def test_a_server_back_from_an_outage_gets_the_backlog_at_once_not_after_the_backoff(tmp_path: Path) -> None:
    """After an outage the backlog goes within seconds of the server being back, not after the backoff its
    failed publishes built up (up to 30 s before): the client reconnecting ends the backoff, and NATS's cap
    is 5 s. Either keeps this test within its bound; `resume` alone is tested in test_drain_loop.py."""
    require_nats_server()
    spool = Spool(tmp_path / "spool", 1 << 20)
    server = NatsServer(tmp_path, {"a1": "red"})
    server.start()
    login = NatsLogin([server.url], "a1", server.passwords["a1"], inbox_prefix="_INBOX.a1")
    shipper = NatsShipper(spool, login, "red", "a1", clock=time.monotonic, rng=random.Random(1))
    try:
        assert asyncio.run(_stream_messages(server, create=True)) == 0
        spool.append(encode(batch("a1", 1)))
        shipper.start()
        wait_for(lambda: spool.pending() == 0)
        server.kill()  # JetStream's file store keeps the stream for the restart
        errors = shipper.stats.errors
        shipper.drain.failures = 10  # as after a long outage: the next wait is at its cap
        spool.append(encode(batch("a1", 2)))
        shipper.wake()
        wait_for(lambda: shipper.stats.errors > errors)  # the publish failed: the loop is in its backoff
        server.start()
        # Reconnected within about a second (the client's own pace); 30 s caps waited 15-30 s here.
        wait_for(lambda: spool.pending() == 0, timeout=12)
        # Both are in the stream (the publish that timed out may be there twice: the client sent it from its
        # buffer on reconnecting; the controller's ingest ledger stores a batch once).
        assert asyncio.run(_stream_messages(server, create=False)) >= 2
    finally:
        shipper.stop()
        spool.close()
        server.stop()
