"""Wire version 2 over NATS, negotiated: a pool's controller says in a JetStream key-value bucket which wire
versions it reads, and an agent sends version 2 only while a promise that expires says so. With none (no
controller, an expired or withdrawn one, one that never expires) a spooled version-2 batch goes as version 1:
a controller that cannot read version 2 would terminate it, and over NATS the agent would never know."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from prometheus_client import CollectorRegistry

import fleetguard.shipping.wire_advert as wire_advert
from fleetguard.config import load_config
from fleetguard.controller.nats_consumer import NatsConsumer, ensure_stream
from fleetguard.controller.process import RunningController, start_controller
from fleetguard.shipping.agent_side import ShippingMetrics
from fleetguard.shipping.batch_key import batch_key
from fleetguard.shipping.nats_connect import NatsLogin, connect
from fleetguard.shipping.nats_shipper import NatsShipper
from fleetguard.shipping.nats_subjects import advert_bucket, subject_for
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.spool_buffer import SpoolBuffer
from fleetguard.shipping.wire_v2 import WIRE_VERSION_2, encode_v2, is_v2
from tests.controller.helpers import batch, gpu_rows
from tests.scale.natsd import CONTROLLER_USER, NatsServer, require_nats_server, wait_for

if TYPE_CHECKING:
    from nats.js.api import StreamInfo
    from nats.js.client import JetStreamContext

T = TypeVar("T")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

POOL = "red"
REFRESH_SECONDS = 0.3  # both ends read and write this often here (60 s in production)


@pytest.fixture(autouse=True)
def quick_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_advert, "ADVERT_REFRESH_SECONDS", REFRESH_SECONDS)


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    require_nats_server()
    server = NatsServer(tmp_path, {"a1": POOL})
    server.start()
    yield server
    server.stop()


def _start_controller(tmp_path: Path, nats: NatsServer, **more: object) -> RunningController:
    overrides = {
        "store.path": str(tmp_path / "controller.duckdb"),
        "controller.listen": "127.0.0.1:0",
        "controller.tokens_file": str(tmp_path / "tokens.json"),
        "controller.pool": POOL,
        "dashboard.enabled": False,
        "controller.nats_url": nats.url,
        "controller.nats_user": CONTROLLER_USER,
        "controller.nats_password_file": str(nats.password_file(CONTROLLER_USER)),
        **more,
    }
    return start_controller(load_config(overrides=overrides))


def _consumer(running: RunningController) -> NatsConsumer:
    consumer = getattr(running.sources[0], "__self__", None)
    assert isinstance(consumer, NatsConsumer)
    return consumer


def _agent(tmp_path: Path, nats: NatsServer) -> NatsShipper:
    login = NatsLogin([nats.url], "a1", nats.passwords["a1"], inbox_prefix="_INBOX.a1")
    spool = Spool(tmp_path / "spool", 1 << 20)
    return NatsShipper(spool, login, POOL, "a1", clock=time.monotonic, rng=random.Random(1))


def _reads_after(shipper: NatsShipper, reads: int) -> None:
    """Until the agent has read the advertisement `reads` more times (what it found is its wire version)."""
    target = shipper.transport.wire_reads + reads
    wait_for(lambda: shipper.transport.wire_reads >= target)


async def _as_controller(nats: NatsServer, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
    nc = await connect(NatsLogin([nats.url], CONTROLLER_USER, nats.passwords[CONTROLLER_USER]), "test")
    try:
        return await work(nc.jetstream())
    finally:
        await nc.close()


def _last_published(nats: NatsServer) -> bytes:
    """The last message the agent published, read from the stream (no controller consumes it)."""

    async def last(js: JetStreamContext) -> bytes:
        msg = await js.get_last_msg("FLEETGUARD", subject_for(POOL, "a1"))
        assert isinstance(msg.data, bytes)
        return msg.data

    return asyncio.run(_as_controller(nats, last))


def _stored_gpu_rows(running: RunningController) -> int:
    assert running.writer.wait_committed(30)
    cursor = running.store.connection.cursor()
    try:
        row = cursor.execute("SELECT count(*) FROM gpu_samples WHERE host = 'a1'").fetchone()
        return int(row[0]) if row else 0
    finally:
        cursor.close()


def test_an_agent_sends_v2_once_its_controller_says_it_reads_it_and_the_rows_land(
    tmp_path: Path, nats: NatsServer
) -> None:
    running = _start_controller(tmp_path, nats)
    shipper = _agent(tmp_path, nats)
    buffer = SpoolBuffer(shipper.spool, "a1", 1.0, on_appended=shipper.wake, wire=shipper.wire)
    shipper.start()
    try:
        consumer = _consumer(running)
        wait_for(lambda: shipper.wire.version == WIRE_VERSION_2)
        registry = CollectorRegistry()
        registry.register(ShippingMetrics(shipper.spool, buffer, shipper))
        assert registry.get_sample_value("fleetguard_shipper_wire_version") == 2
        for i in range(3):
            buffer.add(gpu_rows("a1", time.time() + i, gpus=4))
            buffer.flush()
        wait_for(lambda: consumer.stats.acked >= 3)
        assert (consumer.stats.wire_v2, consumer.stats.wire_v1) == (3, 0)
        assert _stored_gpu_rows(running) == 12
        assert shipper.spool.pending() == 0
    finally:
        shipper.stop()
        running.stop()


def test_a_controller_stopping_withdraws_its_promise_and_the_agent_sends_v1(
    tmp_path: Path, nats: NatsServer
) -> None:
    running = _start_controller(tmp_path, nats)
    shipper = _agent(tmp_path, nats)
    shipper.start()
    try:
        wait_for(lambda: shipper.wire.version == WIRE_VERSION_2)
        running.stop()
        wait_for(lambda: shipper.wire.version != WIRE_VERSION_2)
        shipper.spool.append(encode_v2(batch("a1", 1)))  # spooled while the promise held
        shipper.wake()
        wait_for(lambda: shipper.stats.committed == 1)
        body = _last_published(nats)
        assert not is_v2(body)
        assert batch_key(body) == ("a1", "boot-1", 1)
    finally:
        shipper.stop()


def test_with_no_controller_a_spooled_v2_batch_is_published_as_v1(tmp_path: Path, nats: NatsServer) -> None:
    asyncio.run(_as_controller(nats, lambda js: ensure_stream(js, "FLEETGUARD")))
    shipper = _agent(tmp_path, nats)
    shipper.start()
    try:
        _reads_after(shipper, 2)
        assert shipper.wire.version == 1
        shipper.spool.append(encode_v2(batch("a1", 5)))
        shipper.wake()
        wait_for(lambda: shipper.stats.committed == 1)
        body = _last_published(nats)
        assert not is_v2(body)
        assert batch_key(body) == ("a1", "boot-1", 5)
    finally:
        shipper.stop()


def test_an_advertisement_that_expires_unrefreshed_takes_the_agent_back_to_v1(
    tmp_path: Path, nats: NatsServer
) -> None:
    shipper = _agent(tmp_path, nats)
    shipper.start()
    try:
        asyncio.run(_as_controller(nats, lambda js: wire_advert.put_advert(js, POOL, [1, 2], 1.0)))
        wait_for(lambda: shipper.wire.version == WIRE_VERSION_2)
        wait_for(lambda: shipper.wire.version == 1, timeout=20)  # its entry lives 1 s; nobody puts it again
    finally:
        shipper.stop()


async def _put_forever(js: JetStreamContext) -> None:
    from nats.js.api import KeyValueConfig

    kv = await js.create_key_value(KeyValueConfig(bucket=advert_bucket(POOL)))
    await kv.put(wire_advert.ADVERT_KEY, wire_advert.advert_bytes([1, 2]))


def test_a_promise_that_never_expires_is_not_taken(
    tmp_path: Path, nats: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A bucket made by hand without a max age would keep vouching for a controller long replaced: the agent
    sends version 1, and the controller, which puts its versions there all the same, says why."""
    asyncio.run(_as_controller(nats, _put_forever))
    running = _start_controller(tmp_path, nats)
    shipper = _agent(tmp_path, nats)
    shipper.start()
    try:
        wait_for(lambda: _consumer(running).advertiser.puts >= 2)
        _reads_after(shipper, 2)
        assert shipper.wire.version == 1
        assert "agents take no promise from it" in caplog.text
    finally:
        shipper.stop()
        running.stop()


def test_a_controller_told_nats_wire_1_keeps_its_agents_on_v1(tmp_path: Path, nats: NatsServer) -> None:
    running = _start_controller(tmp_path, nats, **{"controller.nats_wire": 1})
    shipper = _agent(tmp_path, nats)
    shipper.start()
    try:
        consumer = _consumer(running)
        wait_for(lambda: consumer.advertiser.puts >= 1)
        _reads_after(shipper, 2)
        assert shipper.wire.version == 1
    finally:
        shipper.stop()
        running.stop()


def test_a_host_not_allowed_to_read_the_advertisement_ships_v1(tmp_path: Path) -> None:
    """A NATS server configured before the wire was negotiated over NATS costs its hosts version 2, nothing
    else: the read is refused (and times out), the agent sends version 1, and its batches land."""
    require_nats_server()
    nats = NatsServer(tmp_path, {"a1": POOL}, advert_reads=False)
    nats.start()
    running = _start_controller(tmp_path, nats)
    shipper = _agent(tmp_path, nats)
    buffer = SpoolBuffer(shipper.spool, "a1", 1.0, on_appended=shipper.wake, wire=shipper.wire)
    shipper.start()
    try:
        consumer = _consumer(running)
        wait_for(lambda: consumer.advertiser.puts >= 1)
        _reads_after(shipper, 1)  # refused: nats-py's request times out (5 s)
        assert shipper.wire.version == 1
        buffer.add(gpu_rows("a1", time.time()))
        buffer.flush()
        wait_for(lambda: consumer.stats.acked >= 1)
        assert (consumer.stats.wire_v1, consumer.stats.wire_v2) == (1, 0)
    finally:
        shipper.stop()
        running.stop()
        nats.stop()


def test_the_bucket_is_checked_on_the_first_read_every_tenth_and_after_a_recheck(nats: NatsServer) -> None:
    """Reads between two checks of the bucket's max age fetch the entry alone: a fleet reads every minute."""

    async def reads(js: JetStreamContext) -> list[int]:
        await wire_advert.put_advert(js, POOL, [1, 2], 60.0)
        infos: list[str] = []
        real_info = js.stream_info

        async def counted(name: str, subjects_filter: str | None = None) -> StreamInfo:
            infos.append(name)
            return await real_info(name, subjects_filter)

        js.stream_info = counted  # type: ignore[method-assign]
        reader = wire_advert.AdvertReader(POOL)
        seen = []
        for _ in range(2 * (wire_advert.BUCKET_CHECK_EVERY + 1)):
            assert await reader.read(js) == [1, 2]
            seen.append(len(infos))
        reader.recheck()
        assert await reader.read(js) == [1, 2]
        seen.append(len(infos))
        return seen

    seen = asyncio.run(_as_controller(nats, reads))
    every = wire_advert.BUCKET_CHECK_EVERY
    assert seen == [1] * (every + 1) + [2] * (every + 1) + [3]


def test_a_failed_read_keeps_what_the_controller_said_until_the_entry_it_read_lapses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reads that fail (NATS slow under load, a blip) say nothing of the promise, which the bucket keeps until
    its entry lapses: an agent that went back to version 1 at once would double the controller's cost of its
    batches just when NATS is loaded. Here the agent's reads are refused from some moment on (its server's
    permissions reloaded); it keeps version 2 until the entry it read lapses, then sends version 1."""
    require_nats_server()
    nats = NatsServer(tmp_path, {"a1": POOL})
    nats.start()
    shipper = _agent(tmp_path, nats)
    shipper.start()
    ttl = 20.0  # room for a loaded machine: seen as v2, reload, one read timed out (5 s), all inside it
    try:
        caplog.set_level("INFO", logger="fleetguard.shipping.nats_shipper")
        asyncio.run(_as_controller(nats, lambda js: wire_advert.put_advert(js, POOL, [1, 2], ttl)))
        put_at = time.time()
        wait_for(lambda: shipper.wire.version == WIRE_VERSION_2)
        nats.advert_reads = False
        nats.reload()
        wait_for(lambda: "cannot read which wire versions" in caplog.text)  # a read refused (timed out)
        assert time.time() < put_at + ttl  # within the entry's life: the case this test is about
        assert shipper.wire.version == WIRE_VERSION_2
        assert "keeping what it last said until that lapses" in caplog.text
        wait_for(lambda: shipper.wire.version == 1)
        assert time.time() >= put_at + ttl - 1.0  # not before the entry lapsed (1 s: the server's stamp)
        # Nor long after, though each refused read takes nats-py's request timeout (5 s) to fail: one under
        # way when the entry lapses is given up then (1 s: this test's polling, a loaded machine's timers)
        assert time.time() <= put_at + ttl + 1.0
    finally:
        shipper.stop()
        nats.stop()


def test_a_host_whose_clock_is_behind_the_servers_keeps_no_promise_past_the_entrys_lapse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry lapses at the server's stamp plus the bucket's max age, on the server's clock. An agent whose
    clock is an hour behind (no NTP, a clock stepped back) must not read that as an hour left: the entry was
    stamped before the read, so it is gone a max age after it at the latest. Holding the promise for the
    hour would have this agent send version 2 to a controller downgraded meanwhile, which terminates it."""
    require_nats_server()
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600.0)  # this process is the agent's host
    nats = NatsServer(tmp_path, {"a1": POOL})
    nats.start()
    shipper = _agent(tmp_path, nats)
    shipper.start()
    ttl = 6.0
    try:
        asyncio.run(_as_controller(nats, lambda js: wire_advert.put_advert(js, POOL, [1, 2], ttl)))
        put_at = real_time()
        wait_for(lambda: shipper.wire.version == WIRE_VERSION_2)
        nats.advert_reads = False
        nats.reload()
        refused_from = real_time()  # no read succeeds after this (the server applies it at once)
        wait_for(lambda: shipper.wire.version == 1, timeout=3 * ttl)
        # The last read that succeeded came before `refused_from`: what it found lapses within a max age of
        # it, whatever this host's clock says (1 s: this test's polling, a loaded machine's timers).
        assert refused_from < put_at + ttl  # refused while the entry lived: the case this test is about
        assert real_time() <= refused_from + ttl + 1.0
    finally:
        shipper.stop()
        nats.stop()
