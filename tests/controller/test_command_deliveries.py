"""A command's `deliveries` count the copies sent: each answer that carried it (a duplicate's too) and each
NATS publish, noted when sent and written by the writer's next commit; none lost to a failed commit or to
the writer's stop, and none for an answer to a NATS batch (its host is sent its commands over NATS)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from fleetguard.clock import SystemClock
from fleetguard.controller import ingest
from fleetguard.controller.command_queue import record_deliveries
from fleetguard.controller.ingest import IngestResult, IngestWriter, Pending
from fleetguard.controller.journal import Journal, JournalEntry
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import IngestBatch, parse_batch
from fleetguard.shipping.commands import CommandKind
from fleetguard.shipping.wire import encode
from fleetguard.store import Store
from tests.controller.helpers import batch


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
