"""Controller commands reach hosts that ship through NATS: a restart queued on the controller is published to
the host's command subject, pulled from the host's own consumer into the agent's journal, run once (even when
JetStream delivers it again to a restarted agent) and acknowledged in a batch; no other host can pull it."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import fleetguard.controller.nats_commands as nats_commands
from fleetguard.config import load_config
from fleetguard.controller.nats_consumer import NatsConsumer
from fleetguard.controller.process import RunningController, start_controller
from fleetguard.controller.tokens import Role, add_token
from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import CommandKind, CommandOutcome, HostCommand, command_from_json
from fleetguard.shipping.nats_connect import NatsLogin, connect
from fleetguard.shipping.nats_shipper import NatsShipper
from fleetguard.shipping.nats_subjects import (
    MSG_ID_HEADER,
    command_consumer,
    command_stream,
    command_subject,
    msg_id,
    subject_for,
)
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.spool_buffer import SpoolBuffer
from fleetguard.shipping.wire import encode
from tests.controller.helpers import batch
from tests.scale.natsd import CONTROLLER_USER, NatsServer, require_nats_server, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOL = "red"


class Recorder:
    """The host's runtime: remembers every command it was asked to run."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def __call__(self, command: HostCommand) -> tuple[CommandOutcome, str]:
        self.runs.append(command.command_id)
        return CommandOutcome.DONE, f"restarted {command.job_id}"


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    require_nats_server()
    server = NatsServer(tmp_path, {"a1": POOL, "a2": POOL})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def controller(
    tmp_path: Path, nats: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunningController, str]]:
    # A command a host pulled and never acked (it crashed) comes back after this; 30 s in production.
    monkeypatch.setattr(nats_commands, "CONSUMER_ACK_WAIT_SECONDS", 2.0)
    tokens = tmp_path / "tokens.json"
    operator = add_token(tokens, "*", Role.OPERATOR)
    overrides = {
        "store.path": str(tmp_path / "controller.duckdb"),
        "controller.listen": "127.0.0.1:0",
        "controller.tokens_file": str(tokens),
        "controller.pool": POOL,
        "dashboard.enabled": False,
        "controller.nats_url": nats.url,
        "controller.nats_user": CONTROLLER_USER,
        "controller.nats_password_file": str(nats.password_file(CONTROLLER_USER)),
    }
    running = start_controller(load_config(overrides=overrides))
    yield running, operator
    running.stop()


def _consumer(running: RunningController) -> NatsConsumer:
    consumer = getattr(running.sources[0], "__self__", None)
    assert isinstance(consumer, NatsConsumer)
    return consumer


def _login(nats: NatsServer, user: str) -> NatsLogin:
    return NatsLogin([nats.url], user, nats.passwords[user], inbox_prefix=f"_INBOX.{user}")


def _api(running: RunningController, operator: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{running.port}{path}",
        data=data,
        method="GET" if body is None else "POST",
        headers={"Authorization": f"Bearer {operator}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _command_row(running: RunningController, operator: str, command_id: str) -> dict[str, object]:
    doc = _api(running, operator, "/v1/commands?host=a1")
    assert isinstance(doc, dict)
    (row,) = [c for c in doc["commands"] if c["command_id"] == command_id]
    assert isinstance(row, dict)
    return row


async def _publish(nats: NatsServer, user: str, body: bytes, mid: str) -> None:
    nc = await connect(_login(nats, user), f"test {user}")
    try:
        await nc.jetstream().publish(subject_for(POOL, user), body, timeout=10, headers={MSG_ID_HEADER: mid})
    finally:
        await nc.close()


async def _pull_once(nats: NatsServer, user: str, host: str, wait: float) -> tuple[list[bytes], list[str]]:
    """As `user`, pull from `host`'s command consumer and never ack (an agent that dies right after); the
    payloads pulled and the errors the server sent."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await connect(_login(nats, user), f"test {user}", on_error=on_error)
    try:
        sub = await nc.jetstream().pull_subscribe_bind(
            durable=command_consumer(host), stream=command_stream(POOL)
        )
        try:
            msgs = await sub.fetch(1, timeout=wait)
        except Exception:
            msgs = []
        await asyncio.sleep(0.2)  # a permissions -ERR arrives asynchronously
        return [m.data for m in msgs], errors
    finally:
        await nc.close()


async def _stream_messages(nats: NatsServer) -> int:
    nc = await connect(_login(nats, CONTROLLER_USER), "test controller")
    try:
        info = await nc.jetstream().stream_info(command_stream(POOL))
        return int(info.state.messages)
    finally:
        await nc.close()


def test_a_queued_restart_reaches_a_nats_agent_once_across_a_redelivery_and_an_agent_restart(
    tmp_path: Path, nats: NatsServer, controller: tuple[RunningController, str]
) -> None:
    running, operator = controller
    consumer = _consumer(running)
    wait_for(lambda: consumer.stats.connected)
    # a1 ships through NATS (so the controller knows to send it commands this way)
    first = batch("a1", 1, boot_id="boot-1")
    asyncio.run(_publish(nats, "a1", encode(first), msg_id(subject_for(POOL, "a1"), "boot-1", 1)))
    wait_for(lambda: "a1" in consumer.commands.nats_hosts)

    queued = _api(running, operator, "/v1/commands", {"host": "a1", "kind": "restart", "job_id": "job-7"})
    assert isinstance(queued, dict)
    command_id = str(queued["command"]["id"])

    # Another host cannot pull it: its NATS user may pull from its own consumer only.
    stolen, errors = asyncio.run(_pull_once(nats, "a2", "a1", wait=3))
    assert stolen == []
    assert any("permissions violation" in e.lower() for e in errors), errors

    # The agent's first incarnation pulls it, journals it, runs it, and dies before its JetStream ack.
    journal = tmp_path / "a1-spool" / "commands.jsonl"
    recorder = Recorder()
    Spool(tmp_path / "a1-spool", max_bytes=1 << 20).close()  # the agent's private spool directory
    first_life = CommandChannel(journal, recorder)
    first_life.start()
    try:
        pulled, errors = asyncio.run(_pull_once(nats, "a1", "a1", wait=30))
        assert not errors
        (body,) = pulled
        command = command_from_json(json.loads(body))
        assert (command.command_id, command.kind.value, command.job_id) == (command_id, "restart", "job-7")
        first_life.deliver([command])
        wait_for(lambda: recorder.runs == [command_id])
    finally:
        first_life.stop()  # its ack (the outcome) dies with it, never shipped

    # Batches of a1's while the command is pending: none of them carries it (a1 is sent it over NATS).
    acked = consumer.stats.acked
    for seq in (2, 3, 4):
        asyncio.run(
            _publish(
                nats,
                "a1",
                encode(batch("a1", seq, boot_id="boot-1")),
                msg_id(subject_for(POOL, "a1"), "boot-1", seq),
            )
        )
    wait_for(lambda: consumer.stats.acked >= acked + 3)

    # Restarted: the real shipper pulls again; JetStream redelivers the unacked command; the journal answers
    # it with the recorded outcome (not run again), and that ack rides the next batch to the controller.
    spool = Spool(tmp_path / "a1-spool", max_bytes=1 << 20)
    second_life = CommandChannel(journal, recorder)
    shipper = NatsShipper(spool, _login(nats, "a1"), POOL, "a1", channel=second_life, clock=time.monotonic)
    buffer = SpoolBuffer(spool, "a1", 1.0, channel=second_life, on_appended=shipper.wake)
    second_life.start()
    shipper.start()
    try:
        wait_for(
            lambda: _command_row(running, operator, command_id)["acked_ts"] is not None,
            step=buffer.flush,
        )
        assert shipper.commands_received >= 1  # it did come again, through NATS
    finally:
        shipper.stop()
        second_life.stop()
        spool.close()
    row = _command_row(running, operator, command_id)
    assert (row["outcome"], row["detail"]) == ("done", "restarted job-7")
    assert recorder.runs == [command_id]  # run once, in all
    # Delivered as often as it was published (once: a republish waits 300 s), not once per batch of a1's
    # committed while it was pending (a1's answers do not carry commands: it is sent them over NATS).
    assert consumer.commands.published == 1
    assert row["deliveries"] == 1
    assert asyncio.run(_stream_messages(nats)) == 0  # acked by a1's consumer: gone from the stream


def test_an_outcome_lost_with_the_agent_is_answered_from_the_journal_when_the_command_comes_again(
    tmp_path: Path,
    nats: NatsServer,
    controller: tuple[RunningController, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent ran the command and acked it to JetStream, then died before its outcome was shipped: the
    controller publishes the still-pending command again, and the restarted agent's journal answers it."""
    monkeypatch.setattr(nats_commands, "REPUBLISH_SECONDS", 1.0)  # 5 minutes in production
    running, operator = controller
    consumer = _consumer(running)
    wait_for(lambda: consumer.stats.connected)
    asyncio.run(
        _publish(nats, "a1", encode(batch("a1", 1, boot_id="b")), msg_id(subject_for(POOL, "a1"), "b", 1))
    )
    wait_for(lambda: "a1" in consumer.commands.nats_hosts)
    queued = _api(running, operator, "/v1/commands", {"host": "a1", "kind": "checkpoint", "job_id": "j"})
    assert isinstance(queued, dict)
    command_id = str(queued["command"]["id"])

    recorder = Recorder()
    spool_dir = tmp_path / "a1-spool"
    for life in (1, 2):
        spool = Spool(spool_dir, max_bytes=1 << 20)
        channel = CommandChannel(spool_dir / "commands.jsonl", recorder)
        shipper = NatsShipper(spool, _login(nats, "a1"), POOL, "a1", channel=channel, clock=time.monotonic)
        buffer = SpoolBuffer(spool, "a1", 1.0, channel=channel, on_appended=shipper.wake)
        channel.start()
        shipper.start()
        try:
            if life == 1:
                wait_for(lambda: recorder.runs == [command_id])  # then it dies: nothing flushed
            else:
                wait_for(
                    lambda: _command_row(running, operator, command_id)["acked_ts"] is not None,
                    step=buffer.flush,
                )
        finally:
            shipper.stop()
            channel.stop()
            spool.close()
    assert recorder.runs == [command_id]
    assert _command_row(running, operator, command_id)["outcome"] == "done"
    assert consumer.commands.published >= 2


async def _queue_raw(nats: NatsServer, bodies: list[bytes]) -> None:
    """As the controller's NATS user: the command stream, a1's consumer, and `bodies` on a1's subject."""
    nc = await connect(_login(nats, CONTROLLER_USER), "test controller")
    try:
        js = nc.jetstream()
        await nats_commands.ensure_command_stream(js, POOL)
        await nats_commands.ensure_host_consumer(js, POOL, "a1")
        for i, body in enumerate(bodies):
            await js.publish(command_subject(POOL, "a1"), body, headers={MSG_ID_HEADER: f"raw-{i}"})
    finally:
        await nc.close()


def test_an_unreadable_command_is_skipped_and_counted_and_the_next_one_runs(
    tmp_path: Path, nats: NatsServer
) -> None:
    good = HostCommand("c-good", CommandKind.CHECKPOINT, "j", "test")
    asyncio.run(
        _queue_raw(
            nats, [b"{not json", b'{"id": "x", "kind": "format-disk"}', json.dumps(good.to_json()).encode()]
        )
    )
    recorder = Recorder()
    spool = Spool(tmp_path / "spool", max_bytes=1 << 20)
    channel = CommandChannel(tmp_path / "spool" / "commands.jsonl", recorder)
    shipper = NatsShipper(spool, _login(nats, "a1"), POOL, "a1", channel=channel, clock=time.monotonic)
    channel.start()
    shipper.start()
    try:
        wait_for(lambda: recorder.runs == ["c-good"])
        assert shipper.stats.bad_commands == 2
    finally:
        shipper.stop()
        channel.stop()
        spool.close()
    assert asyncio.run(_stream_messages(nats)) == 0  # the bad ones terminated, the good one acked
