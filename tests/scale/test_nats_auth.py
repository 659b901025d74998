"""NATS is the identity on the JetStream path: a host cannot publish to another host's subject (the server's
permissions refuse it), and what a host does publish goes through the controller's ingest checks (a batch
naming another host than its subject, or garbage, is refused and never stored or redelivered)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from fleetguard.config import load_config
from fleetguard.controller import nats_consumer
from fleetguard.controller.ingest import MAX_SET_ASIDE_PER_HOST
from fleetguard.controller.journal import Journal, JournalEntry
from fleetguard.controller.nats_consumer import NatsConsumer, ensure_stream
from fleetguard.controller.process import RunningController, start_controller
from fleetguard.shipping.nats_connect import NatsLogin, connect
from fleetguard.shipping.nats_shipper import NatsShipper
from fleetguard.shipping.nats_subjects import MSG_ID_HEADER, advert_subject, msg_id, subject_for
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import encode
from fleetguard.shipping.wire_advert import ADVERT_KEY, advert_bytes
from tests.controller.helpers import batch
from tests.scale.natsd import CONTROLLER_USER, NatsServer, require_nats_server, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STREAM = "FLEETGUARD"


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    require_nats_server()
    server = NatsServer(tmp_path, {"a1": "red", "a2": "red"})
    server.start()
    yield server
    server.stop()


def _login(nats: NatsServer, user: str, inbox_owner: str = "") -> NatsLogin:
    prefix = f"_INBOX.{inbox_owner}" if inbox_owner else "_INBOX"
    return NatsLogin([nats.url], user, nats.passwords[user], inbox_prefix=prefix)


async def _publish_as(
    nats: NatsServer, user: str, subject: str, body: bytes, mid: str, ack_timeout: float = 30
) -> tuple[bool, list[str]]:
    """Publish once as `user`; (acked by JetStream, the errors the server sent). A refused publish is never
    answered, so it waits `ack_timeout`; one expected to succeed gets a loaded server's worth of time."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await connect(_login(nats, user, user), f"test {user}", on_error=on_error)
    try:
        try:
            await nc.jetstream().publish(subject, body, timeout=ack_timeout, headers={MSG_ID_HEADER: mid})
            acked = True
        except Exception:
            acked = False
        # The server answers in order: a -ERR for the publish comes before the PONG of this flush, and the
        # client hands it to on_error before it reads on.
        await nc.flush(timeout=30)
        return acked, errors
    finally:
        await nc.close()


async def _stream_messages(nats: NatsServer) -> int:
    nc = await connect(_login(nats, CONTROLLER_USER), "test controller")
    try:
        js = nc.jetstream()
        await ensure_stream(js, STREAM)
        info = await js.stream_info(STREAM)
        return int(info.state.messages)
    finally:
        await nc.close()


def test_a_host_cannot_publish_to_another_hosts_subject(nats: NatsServer) -> None:
    assert asyncio.run(_stream_messages(nats)) == 0
    forged = batch("a2", 1)
    acked, errors = asyncio.run(
        _publish_as(
            nats,
            "a1",
            subject_for("red", "a2"),
            encode(forged),
            msg_id(subject_for("red", "a2"), "boot-1", 1),
            ack_timeout=3,
        )
    )
    assert not acked
    assert any("permissions violation for publish" in e.lower() for e in errors), errors
    assert asyncio.run(_stream_messages(nats)) == 0

    own = batch("a1", 1)
    acked, errors = asyncio.run(
        _publish_as(
            nats, "a1", subject_for("red", "a1"), encode(own), msg_id(subject_for("red", "a1"), "boot-1", 1)
        )
    )
    assert acked and not errors
    assert asyncio.run(_stream_messages(nats)) == 1
    # The same message id again inside the duplicate window: the server keeps one.
    acked, _ = asyncio.run(
        _publish_as(
            nats, "a1", subject_for("red", "a1"), encode(own), msg_id(subject_for("red", "a1"), "boot-1", 1)
        )
    )
    assert acked
    assert asyncio.run(_stream_messages(nats)) == 1


def _controller(tmp_path: Path, nats: NatsServer) -> RunningController:
    overrides = {
        "store.path": str(tmp_path / "controller.duckdb"),
        "controller.listen": "127.0.0.1:0",
        "controller.tokens_file": str(tmp_path / "tokens.json"),
        "controller.pool": "red",
        "dashboard.enabled": False,
        "controller.nats_url": nats.url,
        "controller.nats_user": CONTROLLER_USER,
        "controller.nats_password_file": str(nats.password_file(CONTROLLER_USER)),
    }
    return start_controller(load_config(overrides=overrides))


def _consumer(running: RunningController) -> NatsConsumer:
    stop = running.sources[0]
    consumer = getattr(stop, "__self__", None)
    assert isinstance(consumer, NatsConsumer)
    return consumer


def test_published_batches_go_through_the_ingest_checks(tmp_path: Path, nats: NatsServer) -> None:
    running = _controller(tmp_path, nats)
    consumer = _consumer(running)
    try:
        wait_for(lambda: consumer.stats.connected)
        # a1 may publish on its own subject, but the batch claims to be a2's: refused like a 403.
        lying = batch("a2", 1)
        good = batch("a1", 1)
        for body, mid in (
            (encode(lying), "a1/lie/1"),
            (b"not gzip at all", "a1/garbage/1"),
            (encode(good), msg_id(subject_for("red", "a1"), "boot-1", 1)),
        ):
            acked, _ = asyncio.run(_publish_as(nats, "a1", subject_for("red", "a1"), body, mid))
            assert acked
        wait_for(lambda: consumer.stats.acked == 1 and consumer.stats.terminated == 2)
        # Counted where HTTP refusals are (fleetguard_controller_batches_refused_total on /metrics).
        assert running.writer.stats.refused == {"wrong_host": 1, "malformed": 1}
        with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics", timeout=30) as response:
            metrics = response.read().decode()
        assert 'fleetguard_controller_nats_messages_total{pool="red",outcome="acked"} 1' in metrics
        assert 'fleetguard_controller_nats_messages_total{pool="red",outcome="terminated"} 2' in metrics
        assert 'fleetguard_controller_nats_connected{pool="red"} 1' in metrics
        assert 'fleetguard_controller_batches_refused_total{reason="wrong_host"} 1' in metrics
    finally:
        running.stop()
    con = duckdb.connect(str(tmp_path / "controller.duckdb"), read_only=True)
    try:
        hosts = {str(h) for (h,) in con.execute("SELECT DISTINCT host FROM gpu_samples").fetchall()}
        assert hosts == {"a1"}
        row = con.execute("SELECT count(*) FROM ingest_ledger").fetchone()
        assert row is not None and row[0] == 1
    finally:
        con.close()
    # Terminated messages are gone for good; nothing is left to redeliver. The server applies the acks and
    # terms the consumer sent on its own connection after it answers this one: wait for them, not a guess.
    wait_for(lambda: asyncio.run(_stream_messages(nats)) == 0)


def test_a_forged_message_id_cannot_make_another_hosts_batch_a_duplicate(
    tmp_path: Path, nats: NatsServer
) -> None:
    """Attack #3 of issue 16: a2, allowed to publish only on its own subject, publishes first under the ids
    a1's batch will carry (a1/boot/seq as earlier agents wrote them, and subject/boot/seq as now). The
    stream's dedup spans subjects, so JetStream answers a1's real publish "duplicate": a1 must publish it
    again under a fresh id, delete it from its spool only then, and the controller must store it; a2's
    forged messages are refused."""
    running = _controller(tmp_path, nats)
    consumer = _consumer(running)
    shipper: NatsShipper | None = None
    try:
        wait_for(lambda: consumer.stats.connected)
        victim = batch("a1", 1, boot_id="boot-A")
        a1_subject = subject_for("red", "a1")
        for forged_id in (msg_id(a1_subject, "boot-A", 1), "a1/boot-A/1"):
            acked, errors = asyncio.run(
                _publish_as(nats, "a2", subject_for("red", "a2"), encode(batch("a2", 1)), forged_id)
            )
            assert acked and not errors  # its own subject: the server stores it
        wait_for(lambda: consumer.stats.terminated == 2)
        assert running.writer.stats.refused == {"wrong_host": 2}

        spool = Spool(tmp_path / "a1-spool", max_bytes=1 << 20)
        spool.append(encode(victim))
        shipper = NatsShipper(spool, _login(nats, "a1", "a1"), "red", "a1", clock=time.monotonic)
        shipper.start()
        wait_for(lambda: spool.pending() == 0)
        assert shipper.stats.duplicates == 1  # the first answer was "duplicate": not trusted
        wait_for(lambda: consumer.stats.acked == 1)
    finally:
        if shipper is not None:
            shipper.stop()
        running.stop()
    con = duckdb.connect(str(tmp_path / "controller.duckdb"), read_only=True)
    try:
        hosts = {str(h) for (h,) in con.execute("SELECT DISTINCT host FROM gpu_samples").fetchall()}
        assert hosts == {"a1"}  # a1's batch stored; nothing of a2's forged messages
        ledger = con.execute("SELECT host, boot_id, seq_lo, seq_hi FROM ingest_ledger").fetchall()
        assert ledger == [("a1", "boot-A", 1, 1)]
    finally:
        con.close()


def test_a_lost_ack_republished_is_still_stored_once(tmp_path: Path, nats: NatsServer) -> None:
    """The agent's own earlier copy answered "duplicate" (its ack was lost): published again under a retry
    id, it reaches the controller twice and the ledger stores it once."""
    running = _controller(tmp_path, nats)
    consumer = _consumer(running)
    shipper: NatsShipper | None = None
    try:
        wait_for(lambda: consumer.stats.connected)
        own = batch("a1", 1, boot_id="boot-A")
        acked, _ = asyncio.run(
            _publish_as(
                nats,
                "a1",
                subject_for("red", "a1"),
                encode(own),
                msg_id(subject_for("red", "a1"), "boot-A", 1),
            )
        )
        assert acked
        spool = Spool(tmp_path / "a1-spool", max_bytes=1 << 20)
        spool.append(encode(own))  # still spooled: the first publish's ack never reached the agent
        shipper = NatsShipper(spool, _login(nats, "a1", "a1"), "red", "a1", clock=time.monotonic)
        shipper.start()
        wait_for(lambda: spool.pending() == 0)
        wait_for(lambda: consumer.stats.acked == 2)
        assert shipper.stats.duplicates == 1
    finally:
        if shipper is not None:
            shipper.stop()
        running.stop()
    con = duckdb.connect(str(tmp_path / "controller.duckdb"), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM gpu_samples").fetchone()
        assert row is not None and row[0] == len(own.tables["gpu_samples"]["host"])  # stored once
    finally:
        con.close()


def _connected_gauge(running: RunningController) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics", timeout=30) as response:
        text = response.read().decode()
    gauge = 'fleetguard_controller_nats_connected{pool="red"} '
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(gauge)]
    assert len(values) == 1, text
    return values[0]


def test_the_connected_gauge_follows_the_nats_server(tmp_path: Path, nats: NatsServer) -> None:
    """1 while the pool's consumer is connected, 0 once the server is gone: nats-py reconnects on its own
    while `fetch` only times out, so a flag set at subscribe time stayed 1 (the gauge now asks the client)."""
    running = _controller(tmp_path, nats)
    try:
        wait_for(lambda: _connected_gauge(running) == 1)
        nats.kill()
        wait_for(lambda: _connected_gauge(running) == 0)
    finally:
        running.stop()


def test_a_host_cannot_promise_its_pool_wire_version_2(nats: NatsServer) -> None:
    """The wire advertisement is the controller's word: a host may read its pool's, never write it (a forged
    promise could have every host of the pool send version 2 to a controller that cannot read it)."""
    acked, errors = asyncio.run(
        _publish_as(
            nats, "a1", advert_subject("red", ADVERT_KEY), advert_bytes([1, 2]), "forged", ack_timeout=3
        )
    )
    assert not acked
    assert any("permissions violation for publish" in e.lower() for e in errors), errors


def test_a_nats_host_is_never_held_its_messages_are_taken_not_left_pending_in_the_stream(
    tmp_path: Path, nats: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP a host with MAX_SET_ASIDE_PER_HOST batches set aside is held (503, its batches wait in its
    spool). Over NATS the agent let each batch go once JetStream stored it: held, its messages would wait in
    the stream, nak'ed again and again, each counted in the pool consumer's messages awaiting an ack, until
    hours on the whole pool stalled. So a NATS host's message is taken (a refusal sets it aside as before)."""
    monkeypatch.setattr(nats_consumer, "NAK_DELAY_SECONDS", 0.1)  # a nak would come back at once here
    directory = tmp_path / "controller.duckdb.journal"
    directory.mkdir(mode=0o700)
    earlier = Journal.open(directory)  # what an earlier run set aside for a1
    refused = [JournalEntry("a1", encode(batch("a1", 900 + i)), True, time.time()) for i in range(16)]
    for entry_id, entry in zip(earlier.append_many(refused), refused, strict=True):
        earlier.set_aside(entry_id, entry, "refused by the store")
    earlier.close()
    assert len(refused) == MAX_SET_ASIDE_PER_HOST
    running = _controller(tmp_path, nats)
    consumer = _consumer(running)
    try:
        assert running.writer.held_hosts() == ["a1"]  # held were it an HTTP host
        wait_for(lambda: consumer.stats.connected)
        for user in ("a1", "a2"):
            subject = subject_for("red", user)
            mid = msg_id(subject, "boot-1", 1)
            acked, _ = asyncio.run(_publish_as(nats, user, subject, encode(batch(user, 1)), mid))
            assert acked
        wait_for(lambda: consumer.stats.acked == 2)
        assert running.writer.wait_committed(30)
        assert (consumer.stats.naked, running.writer.stats.refused) == (0, {})
    finally:
        running.stop()
    con = duckdb.connect(str(tmp_path / "controller.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT host, count(*) FROM gpu_samples GROUP BY host ORDER BY host").fetchall()
    finally:
        con.close()
    assert [host for host, _ in rows] == ["a1", "a2"]
