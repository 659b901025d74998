"""`fleetguard up`'s sink: the agent's rows through the controller's ingest in the same process (real DuckDB
file, real writer lanes): one batch per host, every batch stored once through the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.clock import FakeClock
from fleetguard.controller.ingest import IngestWriter
from fleetguard.controller.inprocess import IngestBuffer
from fleetguard.controller.stats import ControllerStats
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.shipping.commands import CommandKind
from fleetguard.store import Store
from tests.controller.helpers import counter_rows, gpu_rows


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "up.duckdb") as s:
        yield s


def _count(store: Store, sql: str) -> int:
    row = store.connection.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def test_rows_of_each_host_are_one_batch_each_and_stored_once(store: Store) -> None:
    clock = FakeClock()
    writer = IngestWriter(store, clock, ControllerStats())
    writer.start()
    try:
        buffer = IngestBuffer(writer, "h0", 1.0, clock)
        now = clock.time()
        buffer.add([*gpu_rows("h0", now), *counter_rows("h0", now), *gpu_rows("h1", now)])
        stored: list[int] = []
        buffer.after_stored(lambda: stored.append(1))
        assert buffer.flush() == 5
        clock.advance(1.0)
        buffer.add(gpu_rows("h1", clock.time()))
        assert buffer.flush() == 2
    finally:
        writer.stop()
    assert stored == [1] and len(buffer) == 0
    assert buffer.rows_written == {"gpu_samples": 6, "nic_counters": 1}
    ledger = store.connection.execute(
        "SELECT host, count(*), sum(seq_hi - seq_lo + 1), max(seq_hi), sum(rows) FROM ingest_ledger "
        "GROUP BY host ORDER BY host"
    ).fetchall()
    assert ledger == [("h0", 1, 1, 1, 3), ("h1", 2, 2, 2, 4)]
    assert _count(store, "SELECT count(*) FROM gpu_samples") == 6
    assert _count(store, "SELECT count(*) FROM fleet_hosts") == 2


def test_a_batch_whose_commit_outlived_the_flush_is_sent_again_and_stored_once(store: Store) -> None:
    clock = FakeClock()
    writer = IngestWriter(store, clock, ControllerStats())  # not started yet: nothing commits
    buffer = IngestBuffer(writer, "h0", 1.0, clock, commit_wait_seconds=0.01)
    buffer.add([*gpu_rows("h0", clock.time()), *gpu_rows("h1", clock.time())])
    stored: list[int] = []
    buffer.after_stored(lambda: stored.append(1))
    assert buffer.flush() == 0
    assert buffer.uncommitted_batches == 2 and len(buffer) == 4 and stored == []
    writer.start()  # the first submissions commit now; the flush below sends both batches again
    try:
        buffer.commit_wait_seconds = 60.0
        assert buffer.flush() == 4
    finally:
        writer.stop()
    assert buffer.uncommitted_batches == 0 and stored == [1]
    assert buffer.batches_committed == 2 and buffer.batches_duplicate == 2
    assert buffer.rows_written == {"gpu_samples": 4}
    assert _count(store, "SELECT count(*) FROM gpu_samples") == 4
    assert _count(store, "SELECT count(DISTINCT (host, gpu_index, ts)) FROM gpu_samples") == 4
    assert _count(store, "SELECT sum(seq_hi - seq_lo + 1) FROM ingest_ledger") == 2


def test_a_batch_the_checks_refuse_is_dropped_and_counted_and_the_rest_stored(store: Store) -> None:
    clock = FakeClock()
    writer = IngestWriter(store, clock, ControllerStats())
    writer.start()
    try:
        buffer = IngestBuffer(writer, "h0", 1.0, clock)
        # only the controller may conclude a host is silent: the checks refuse the batch holding this
        forged = Finding(clock.time(), "x", FindingKind.HOST_SILENT, Severity.WARNING, "host/h1", "")
        buffer.add([*gpu_rows("h0", clock.time()), forged, *gpu_rows("h2", clock.time())])
        assert buffer.flush() == 2
    finally:
        writer.stop()
    assert buffer.rejected_rows == 3  # h0's batch: its 2 GPU rows and the finding
    assert buffer.uncommitted_batches == 0
    assert _count(store, "SELECT count(*) FROM gpu_samples WHERE host = 'h2'") == 2
    assert _count(store, "SELECT count(*) FROM findings") == 0


def test_commands_of_hosts_no_agent_here_runs_are_not_delivered(store: Store) -> None:
    """A simulated host's answers carry none of its commands (no agent here runs them): they stay pending
    with no delivery counted, not one copy "sent" per flush to nobody."""
    clock = FakeClock()
    writer = IngestWriter(store, clock, ControllerStats())
    writer.start()
    try:
        buffer = IngestBuffer(writer, "h0", 1.0, clock)  # no channel: not even h0's own are run here
        command = writer.queue_command("h1", CommandKind.CORDON, None, "test")
        own = writer.queue_command("h0", CommandKind.CORDON, None, "test")
        for _ in range(3):
            buffer.add([*gpu_rows("h0", clock.time()), *gpu_rows("h1", clock.time())])
            assert buffer.flush() == 4
            clock.advance(1.0)
    finally:
        writer.stop()
    deliveries = store.connection.execute(
        "SELECT command_id, deliveries, acked_ts FROM host_commands ORDER BY command_id"
    ).fetchall()
    assert sorted(deliveries) == sorted([(command.command_id, 0, None), (own.command_id, 0, None)])
