"""A command's `deliveries` count the copies sent: each answer that carried it (a duplicate's too) and each
NATS publish, noted when sent and written by the writer's next commit; none lost to a failed commit or to
the writer's stop, and none for an answer to a NATS batch (its host is sent its commands over NATS), nor
for an answer nobody was given: a waiter that gave up before its commit chose the commands (HTTP without a
journal, `up`'s in-process flush), a loop request cancelled before the journal thread chose them."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from fleetguard.clock import FakeClock, SystemClock
from fleetguard.controller import ingest, server
from fleetguard.controller.command_queue import record_deliveries
from fleetguard.controller.ingest import IngestResult, IngestWriter, Pending
from fleetguard.controller.inprocess import IngestBuffer
from fleetguard.controller.journal import Journal, JournalEntry
from fleetguard.controller.loop_ingest import JournalThread
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import BatchRefused, IngestBatch, parse_batch
from fleetguard.httpserve import Response
from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import CommandKind, CommandOutcome, HostCommand
from fleetguard.shipping.wire import encode
from fleetguard.store import Store
from tests.controller.helpers import batch, gpu_rows, metric_value, start_test_controller


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "controller.duckdb"


def _checked(host: str, seq: int) -> tuple[IngestBatch, JournalEntry]:
    body = encode(batch(host, seq))
    now = time.time()
    return parse_batch(body, host, compressed=True, now=now), JournalEntry(host, body, True, now)


def _answered(pending: Pending) -> IngestResult:
    assert pending.done.wait(30), "not committed"
    assert pending.error is None and pending.result is not None, pending.error
    return pending.result


def _deliveries(store: Store, command_id: str) -> int:
    sql = "SELECT deliveries FROM host_commands WHERE command_id = ?"
    row = store.connection.execute(sql, [command_id]).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def writer(path: Path) -> Iterator[IngestWriter]:
    store = Store.open(str(path))
    writer = IngestWriter(store, SystemClock(), ControllerStats(), lanes=1)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop()
        store.close()


def test_copies_sent_after_the_last_commit_are_written_when_the_writer_stops(writer: IngestWriter) -> None:
    """The last answers carry the command after the last commit: no later commit records them, so the
    stop does (they were dropped with the process)."""
    command = writer.queue_command("node-a", CommandKind.CORDON, None, "test")
    carried = sum(command in _answered(writer.submit(_checked("node-a", seq)[0])).commands for seq in (1, 2))
    assert carried == 2
    writer.stop()
    assert _deliveries(writer.store, command.command_id) == carried


def test_a_failed_commit_keeps_the_copies_for_the_next(
    writer: IngestWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = writer.queue_command("node-a", CommandKind.CORDON, None, "test")
    assert command in _answered(writer.submit(_checked("node-a", 1)[0])).commands
    failing = record_deliveries

    def fails_once(con: duckdb.DuckDBPyConnection, sent: dict[str, int], now: float) -> None:
        monkeypatch.setattr(ingest, "record_deliveries", failing)
        raise duckdb.IOException("disk gone")  # the store failing: the group is refused, rolled back

    monkeypatch.setattr(ingest, "record_deliveries", fails_once)
    refused = writer.submit(_checked("node-b", 1)[0])
    assert refused.done.wait(30) and refused.error is not None
    assert command in _answered(writer.submit(_checked("node-a", 2)[0])).commands
    writer.stop()
    assert _deliveries(writer.store, command.command_id) == 2


def test_journaled_answers_count_theirs_and_nats_batches_none(tmp_path: Path, path: Path) -> None:
    """With the journal, an answer (fresh or duplicate) is a copy when accepted; a batch read from NATS
    is answered with none, so its acceptance counts nothing."""
    store = Store.open(str(path))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal, lanes=1)
    writer.start()
    try:
        command = writer.queue_command("node-a", CommandKind.CORDON, None, "test")
        answers = [
            *writer.accept([_checked("node-a", 1)]),
            *writer.accept([_checked("node-a", 1)]),  # a resend: "duplicate", with the command again
            *writer.accept([_checked("node-a", 2)], replies=False),
            *writer.accept([_checked("node-a", 2)], replies=False),
        ]
        carried = [isinstance(a, IngestResult) and command in a.commands for a in answers]
        assert carried == [True, True, False, False]
        assert writer.wait_committed(20)
        writer.stop()
        assert _deliveries(store, command.command_id) == 2
    finally:
        writer.stop()
        journal.close()
        store.close()


# ---- answers nobody was given -----------------------------------------------------------------------------


def _hold_next_commit(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """The writer's next commit waits, inside its transaction and so before it chooses its answers'
    commands, until the event returned is set (at most 30 s)."""
    release = threading.Event()

    def held(con: duckdb.DuckDBPyConnection, sent: dict[str, int], now: float) -> None:
        monkeypatch.setattr(ingest, "record_deliveries", record_deliveries)
        release.wait(30)
        record_deliveries(con, sent, now)

    monkeypatch.setattr(ingest, "record_deliveries", held)
    return release


def _stored_deliveries(path: str) -> list[tuple[str, int]]:
    con = duckdb.connect(path, read_only=True)
    try:
        rows = con.execute("SELECT command_id, deliveries FROM host_commands").fetchall()
    finally:
        con.close()
    return [(str(c), int(n)) for c, n in rows]


def test_an_http_answer_given_up_before_its_commit_chose_carries_and_counts_no_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a journal the handler waits for the commit; past its wait the agent is told 503 (nothing
    carried), so the commit that comes later counts no copy for it, and the next answer is the first."""
    monkeypatch.setattr(server, "COMMIT_WAIT_SECONDS", 0.2)
    c = start_test_controller(tmp_path, extra={"controller.journal": False})
    release = threading.Event()
    try:
        command = c.running.writer.queue_command("node-a", CommandKind.CORDON, None, "test")
        release = _hold_next_commit(monkeypatch)
        assert c.ship(batch("node-a", 1)).status == 503  # its commit is held past the handler's wait
        release.set()
        answered = c.ship(batch("node-a", 2))  # node-a's lane: committed after batch 1's commit
        assert answered.status == 200
        assert [x["id"] for x in answered.doc["commands"]] == [command.command_id], "still pending"
        delivered = 'fleetguard_controller_commands_total{stage="delivered"}'
        assert metric_value(c.metrics(), delivered) == 1
    finally:
        release.set()
        c.running.stop()
    assert _stored_deliveries(c.config_overrides["store.path"]) == [(command.command_id, 1)]


def test_an_http_answer_whose_commands_the_commit_chose_first_is_given_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler gives up after the commit chose the answer's commands (counted as sent) and before the
    answer was ready: that answer is on its way, so the agent gets it (200, with the command), not a 503."""
    monkeypatch.setattr(server, "COMMIT_WAIT_SECONDS", 0.2)
    c = start_test_controller(tmp_path, extra={"controller.journal": False})
    writer = c.running.writer
    gave_up = threading.Event()
    real_abandon = writer.abandon

    def abandon(pending: Pending) -> bool:
        try:
            return real_abandon(pending)
        finally:
            gave_up.set()

    def hold_the_answer(b: IngestBatch) -> None:  # a commit hook: after the choice, before the answer
        if b.host == "node-a":
            gave_up.wait(10)

    monkeypatch.setattr(writer, "abandon", abandon)
    writer.on_committed.append(hold_the_answer)
    try:
        command = writer.queue_command("node-a", CommandKind.CORDON, None, "test")
        reply = c.ship(batch("node-a", 1))
        assert gave_up.is_set(), "the handler's wait ran out before the answer was ready"
        assert reply.status == 200
        assert [x["id"] for x in reply.doc["commands"]] == [command.command_id]
    finally:
        gave_up.set()
        c.running.stop()
    assert _stored_deliveries(c.config_overrides["store.path"]) == [(command.command_id, 1)]


class _Runs:
    def __init__(self) -> None:
        self.ran = threading.Event()

    def __call__(self, command: HostCommand) -> tuple[CommandOutcome, str]:
        self.ran.set()
        return CommandOutcome.DONE, "cordoned"


def test_an_in_process_flush_that_gave_up_counts_no_command_and_its_resubmission_delivers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up`'s flush stops waiting for a commit and submits the batch again at the next flush: the first
    submission's answer, read by nobody, counts nothing; the resubmission's ("duplicate") carries it."""
    clock = FakeClock()
    store = Store.open(str(tmp_path / "up.duckdb"))
    stats = ControllerStats()
    writer = IngestWriter(store, clock, stats)
    writer.start()
    runs = _Runs()
    channel = CommandChannel(tmp_path / "commands.jsonl", runs)
    channel.start()
    release = threading.Event()
    try:
        buffer = IngestBuffer(writer, "h0", 1.0, clock, channel=channel, commit_wait_seconds=0.2)
        command = writer.queue_command("h0", CommandKind.CORDON, None, "test")
        release = _hold_next_commit(monkeypatch)
        buffer.add(gpu_rows("h0", clock.time()))
        assert buffer.flush() == 0 and buffer.uncommitted_batches == 1
        release.set()
        buffer.commit_wait_seconds = 60.0
        assert buffer.flush() == 2 and buffer.batches_duplicate == 1
        assert runs.ran.wait(10), "the resubmission's answer carried the command to the host's runtime"
        writer.stop()
        assert stats.commands_delivered == 1
        sql = "SELECT command_id, deliveries FROM host_commands"
        assert store.connection.execute(sql).fetchall() == [(command.command_id, 1)]
    finally:
        release.set()
        channel.stop()
        writer.stop()
        store.close()


def test_a_loop_request_cancelled_before_its_commands_were_chosen_counts_none(
    tmp_path: Path, path: Path
) -> None:
    """A loop request whose future is cancelled (its task ended) before the journal thread hands it to the
    writer: the batch is journaled, but its answer counts no copy; the resend's answer carries it."""
    store = Store.open(str(path))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    stats = ControllerStats()
    writer = IngestWriter(store, SystemClock(), stats, journal=journal, lanes=1)
    writer.start()
    settled: list[str] = []

    def answer(seq: int, result: IngestResult) -> Response:
        return Response.json(
            200, {"duplicate": result.duplicate, "ids": [c.command_id for c in result.commands]}
        )

    def refuse(exc: BatchRefused) -> Response:
        return Response.json(exc.status, {"reason": exc.reason.value})

    journal_thread = JournalThread(writer, answer, refuse, settled.append)
    journal_thread.start()

    async def cancelled_then_sent_again() -> Response:
        gone = journal_thread.submit(*_checked("node-a", 1))
        gone.cancel()  # in this turn, before the journal thread is handed the batch
        deadline = time.monotonic() + 10
        while not settled:
            assert time.monotonic() < deadline, "the cancelled request's batch was settled"
            await asyncio.sleep(0.01)
        return await journal_thread.submit(*_checked("node-a", 1))

    try:
        command = writer.queue_command("node-a", CommandKind.CORDON, None, "test")
        again = json.loads(asyncio.run(cancelled_then_sent_again()).body)
        assert again == {"duplicate": True, "ids": [command.command_id]}, "journaled, and still pending"
        assert writer.wait_committed(20)
        writer.stop()
        assert stats.commands_delivered == 1
        assert _deliveries(store, command.command_id) == 1
    finally:
        journal_thread.stop()
        writer.stop()
        journal.close()
        store.close()
