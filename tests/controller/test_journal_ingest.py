"""The controller answers a batch once it is in its ingest journal: what it answered and had not committed
when it died is stored at the next start, once; a duplicate is answered as one while still in the journal."""

from __future__ import annotations

import errno
import gzip
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from fleetguard.clock import SystemClock
from fleetguard.controller import ingest
from fleetguard.controller import journal as journal_module
from fleetguard.controller.ingest import SPILL_FACTOR, IngestResult, IngestWriter, Pending
from fleetguard.controller.journal import SUFFIX, Journal, JournalEntry
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.status_view import render_status
from fleetguard.controller.validate import BatchRefused, Refusal, parse_batch
from fleetguard.shipping.wire import encode
from fleetguard.store import Store
from tests.controller.helpers import batch, metric_value, start_test_controller


def _first_life(tmp_path: Path, bodies: list[tuple[str, bytes]], max_queue: int = 64) -> list[object]:
    """A controller's writer that answers from its journal and dies before any lane commits (its lanes are
    never started; the store is closed without a stop, the journal without a close: a kill)."""
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal, max_queue=max_queue)
    now = time.time()
    items = [
        (parse_batch(body, host, compressed=True, now=now), JournalEntry(host, body, True, now))
        for host, body in bodies
    ]
    answers: list[object] = list(writer.accept(items))
    store.close()
    return answers


def _stored(path: Path, host: str) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM ingest_ledger WHERE host = ?", [host]).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def test_a_batch_answered_and_not_committed_before_a_kill_is_stored_at_the_next_start(tmp_path: Path) -> None:
    first = encode(batch("node-a", 1))
    answers = _first_life(tmp_path, [("node-a", first), ("node-b", encode(batch("node-b", 1)))])
    assert all(isinstance(a, IngestResult) and not a.duplicate for a in answers)
    assert list((tmp_path / "controller.duckdb.journal").glob("*" + SUFFIX)), "answered, so on disk"

    c = start_test_controller(tmp_path)
    try:
        # Replayed before the first request is served: the agent's resend of it is a duplicate.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if metric_value(c.metrics(), "fleetguard_controller_journal_entries") == 0:
                break
            time.sleep(0.05)
        again = c.ship(batch("node-a", 1))
        assert again.status == 200 and again.doc["duplicate"] is True
    finally:
        c.running.stop()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 1
    assert _stored(tmp_path / "controller.duckdb", "node-b") == 1
    assert not list((tmp_path / "controller.duckdb.journal").glob("*" + SUFFIX)), "a clean stop leaves none"


def test_a_batch_sent_again_while_in_the_journal_is_a_duplicate_and_journaled_once(tmp_path: Path) -> None:
    body = encode(batch("node-a", 7))
    answers = _first_life(tmp_path, [("node-a", body), ("node-a", body)])
    assert [a.duplicate for a in answers if isinstance(a, IngestResult)] == [False, True]
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    assert [entry.host for _, entry in journal.replay()] == ["node-a"]
    journal.close()


def test_a_full_queue_refuses_before_the_journal_and_leaves_nothing_held(tmp_path: Path) -> None:
    # Two lanes of one slot each, and room for SPILL_FACTOR more as journaled bodies: one lane's host
    # finds its lane full at its batch 2 + SPILL_FACTOR.
    room = 1 + SPILL_FACTOR
    bodies = [("node-a", encode(batch("node-a", seq))) for seq in range(1, room + 3)]
    answers = _first_life(tmp_path, bodies, max_queue=2)
    assert all(isinstance(a, IngestResult) for a in answers[:room])
    refused = [a for a in answers if isinstance(a, BatchRefused)]
    assert len(refused) == 2 and all(a.reason is Refusal.OVERLOADED for a in refused)
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    assert len(journal.replay()) == len(answers) - len(refused), "only what was answered is replayed"
    journal.close()


def test_with_the_journal_off_a_batch_is_answered_once_committed_and_none_is_made(
    tmp_path: Path,
) -> None:
    c = start_test_controller(tmp_path, extra={"controller.journal": False})
    try:
        reply = c.ship(batch("node-a", 1))
        assert reply.status == 200 and reply.doc["duplicate"] is False
        assert "fleetguard_controller_journal_entries" not in c.metrics()
    finally:
        c.running.stop()
    assert not (tmp_path / "controller.duckdb.journal").exists()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 1


def test_a_copy_sent_while_its_batch_is_being_appended_is_not_answered_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An agent's retry (its first request timed out on a slow disk) reaches the controller while the first
    # copy's fdatasync is under way, and that sync then fails: "duplicate" for the retry would let the agent
    # drop a batch that no copy of is kept.
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal)
    in_sync, let_fail = threading.Event(), threading.Event()

    def failing_sync(_fd: int) -> None:
        in_sync.set()
        assert let_fail.wait(timeout=20)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing_sync)
    body = encode(batch("node-a", 3))
    now = time.time()
    item = (parse_batch(body, "node-a", compressed=True, now=now), JournalEntry("node-a", body, True, now))
    first: list[object] = []
    second: list[object] = []
    appending = threading.Thread(target=lambda: first.extend(writer.accept([item])))
    appending.start()
    retrying = threading.Thread(target=lambda: second.extend(writer.accept([item])))
    try:
        assert in_sync.wait(timeout=20)
        retrying.start()
        retrying.join(timeout=5)  # answered at once (a copy that waited for the sync is answered after it)
    finally:
        let_fail.set()
        appending.join(timeout=20)
        if retrying.ident is not None:
            retrying.join(timeout=20)
    journal.close()
    store.close()
    (original,) = first
    (retry,) = second
    assert isinstance(original, BatchRefused) and original.reason is Refusal.STORE_FAILED
    assert isinstance(retry, BatchRefused) and retry.reason is Refusal.OVERLOADED, "the agent keeps it"


class _StoreFailingOnce(IngestWriter):
    """The real writer, whose store refuses the group's content once (to be committed one by one) and then
    fails once on the first batch of those (a disk filling at that moment)."""

    failures: list[Exception]  # raised in turn by the next writes, then none

    def _write(
        self, fresh: list[Pending], now: float, cursor: duckdb.DuckDBPyConnection | None = None
    ) -> Any:
        if self.failures:
            raise self.failures.pop(0)
        return super()._write(fresh, now, cursor)


def test_a_journaled_batch_the_store_cannot_take_one_by_one_is_tried_again_not_left_for_a_restart(
    tmp_path: Path,
) -> None:
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = _StoreFailingOnce(store, SystemClock(), ControllerStats(), journal=journal)
    writer.failures = [
        duckdb.ConversionException("a value its column cannot hold"),
        duckdb.IOException("disk full"),
    ]
    now = time.time()
    items = []
    for host in ("node-a", "node-b"):
        body = encode(batch(host, 1))
        items.append((parse_batch(body, host, compressed=True, now=now), JournalEntry(host, body, True, now)))
    answers = writer.accept(items)
    assert all(isinstance(a, IngestResult) for a in answers), "answered from the journal"
    group: list[Pending] = []
    for lane in writer._lanes:
        while lane.qsize():
            queued = lane.get_nowait()
            assert isinstance(queued, Pending)
            group.append(queued)
    writer.commit_group(group)
    assert writer.wait_committed(0.0)
    assert journal.held == 0, "both committed, so released"
    journal.close()
    store.close()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 1
    assert _stored(tmp_path / "controller.duckdb", "node-b") == 1


def test_a_journaled_batch_counts_its_commands_as_delivered_once(tmp_path: Path) -> None:
    """It is answered with its host's commands when it is accepted; its commit answers nobody, so it delivers
    nothing again (the count used to double with the journal on)."""
    from fleetguard.shipping.commands import CommandKind, HostCommand

    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    stats = ControllerStats()
    writer = IngestWriter(store, SystemClock(), stats, journal=journal)
    writer.commands.queued("node-a", HostCommand("c1", CommandKind.CORDON, None, "test"))
    writer.start()
    try:
        body = encode(batch("node-a", 1))
        now = time.time()
        [answer] = writer.accept(
            [(parse_batch(body, "node-a", compressed=True, now=now), JournalEntry("node-a", body, True, now))]
        )
        assert isinstance(answer, IngestResult) and [c.command_id for c in answer.commands] == ["c1"]
        assert writer.wait_committed(20)
        assert stats.batches_committed == 1
        assert stats.commands_delivered == 1
    finally:
        writer.stop()
        journal.close()
        store.close()


def test_a_copy_in_one_call_beside_several_fresh_batches_is_counted_once(tmp_path: Path) -> None:
    """The copies of a call are answered once, after the fresh batches are queued: not once per fresh batch
    (a loop over them nested in the queuing loop counted a copy as many times as there were fresh batches)."""
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    stats = ControllerStats()
    writer = IngestWriter(store, SystemClock(), stats, journal=journal)
    now = time.time()
    bodies = [(host, encode(batch(host, 1))) for host in ("node-a", "node-b", "node-c", "node-a")]
    items = [(parse_batch(b, h, compressed=True, now=now), JournalEntry(h, b, True, now)) for h, b in bodies]
    try:
        answers = writer.accept(items)
        assert [a.duplicate for a in answers if isinstance(a, IngestResult)] == [False, False, False, True]
        assert stats.duplicates == 1
        assert writer.queue_depth == 3
    finally:
        journal.close()
        store.close()


def _rows_stored(path: Path, host: str) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM gpu_samples WHERE host = ?", [host]).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def _spilling_writer(tmp_path: Path, batches: int) -> tuple[Store, Journal, IngestWriter]:
    """A journaled writer with one slot a lane (lanes not started) that has accepted node-a's batches
    1..`batches`: the first checked, the rest spilled."""
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal, max_queue=2)
    now = time.time()
    items = []
    for seq in range(1, batches + 1):
        body = encode(batch("node-a", seq))
        items.append(
            (parse_batch(body, "node-a", compressed=True, now=now), JournalEntry("node-a", body, True, now))
        )
    assert all(isinstance(a, IngestResult) for a in writer.accept(items))
    return store, journal, writer


def test_batches_past_the_lanes_capacity_wait_as_journaled_bodies_and_are_stored_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store stall fills a lane: what comes past its capacity keeps only its key and journaled body in
    # memory, and is checked again when the lane takes it. One the checks now refuse (they would not: same
    # body, same clock) is set aside, as a replay sets one aside; none is lost.
    checked_again: list[str] = []
    real = ingest.parse_entry

    def counted(entry: JournalEntry) -> Any:
        checked_again.append(entry.host)
        parsed = real(entry)
        if parsed.seq == 4:
            raise BatchRefused(Refusal.INVALID_VALUE, "refused this time")
        return parsed

    monkeypatch.setattr(ingest, "parse_entry", counted)
    store, journal, writer = _spilling_writer(tmp_path, 5)  # one lane (one host): 1 checked, 4 spilled
    writer.start()
    try:
        assert writer.wait_committed(20)
    finally:
        writer.stop()
    assert checked_again == ["node-a"] * 4, "the four past the lane's one slot were checked again"
    assert writer.journal_set_aside == 1
    assert list((tmp_path / "controller.duckdb.journal").glob("*.refused")), "the refused one is kept aside"
    journal.close()
    store.close()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 4
    assert _rows_stored(tmp_path / "controller.duckdb", "node-a") == 4 * 2, "each stored with its rows"


def test_a_large_body_past_the_lanes_capacity_is_refused_not_spilled(tmp_path: Path) -> None:
    # A spilled batch keeps its whole journaled body in memory: with bodies of up to max_body_bytes (8 MiB)
    # SPILL_FACTOR x max_queue_batches of them would be gigabytes. Past the lane's capacity only a body of at
    # most SPILL_BODY_BYTES waits as a shell; a larger one is answered 503 (retry later), as before spilling.
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal, max_queue=2)
    now = time.time()

    def item(seq: int, padding: int) -> tuple[Any, JournalEntry]:
        text = json.dumps(json.loads(gzip.decompress(encode(batch("node-a", seq))))) + " " * padding
        body = text.encode()  # sent uncompressed: its size in memory is its size on the wire
        entry = JournalEntry("node-a", body, False, now)
        return parse_batch(body, "node-a", compressed=False, now=now), entry

    large = ingest.SPILL_BODY_BYTES + 1
    try:
        answers = writer.accept([item(1, large), item(2, large), item(3, 0), item(4, large)])
        assert isinstance(answers[0], IngestResult), "the lane's one checked slot takes any body"
        assert isinstance(answers[1], BatchRefused) and answers[1].reason is Refusal.OVERLOADED
        assert isinstance(answers[2], IngestResult), "a small body past the capacity waits as a shell"
        assert isinstance(answers[3], BatchRefused) and answers[3].reason is Refusal.OVERLOADED
        assert journal.appended == 2, "only what was answered 200 is in the journal"
    finally:
        store.close()
        journal.close()


def test_a_spilled_batch_whose_check_fails_unexpectedly_is_set_aside_and_its_lane_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check again runs on the lane's thread after the batch was answered 200: an error there other than
    # a refusal (MemoryError while a stall fills memory) must neither end the lane, which would leave
    # every batch of its hosts uncommitted until a restart, nor lose the batch.
    real = ingest.parse_entry

    def failing(entry: JournalEntry) -> Any:
        parsed = real(entry)
        if parsed.seq == 3:
            raise MemoryError("no room for the tables")
        return parsed

    monkeypatch.setattr(ingest, "parse_entry", failing)
    store, journal, writer = _spilling_writer(tmp_path, 4)  # one lane (one host): 1 checked, 3 spilled
    writer.start()
    try:
        assert writer.wait_committed(20), "the lane still commits after the failed check"
        assert all(t.is_alive() for t in writer._threads)
    finally:
        writer.stop()
    assert writer.journal_set_aside == 1
    assert list((tmp_path / "controller.duckdb.journal").glob("*.refused")), "the batch is kept aside"
    journal.close()
    store.close()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 3


def test_a_failure_after_the_append_still_queues_what_was_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Anything raising between the append and the answers (the command book, say) must not leave the batch
    # "being written": it is on disk, so it is queued and stored, and the agent's resend is a duplicate.
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal)
    body = encode(batch("node-a", 9))
    now = time.time()
    item = (parse_batch(body, "node-a", compressed=True, now=now), JournalEntry("node-a", body, True, now))
    real = writer.commands.for_host
    failing = {"left": 1}

    def for_host(host: str) -> Any:
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("the command book broke")
        return real(host)

    monkeypatch.setattr(writer.commands, "for_host", for_host)
    writer.start()
    try:
        with pytest.raises(RuntimeError):
            writer.accept([item])
        assert writer.wait_committed(20)
        (again,) = writer.accept([item])
        assert isinstance(again, IngestResult) and again.duplicate
    finally:
        writer.stop()
        journal.close()
        store.close()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 1


def test_a_host_with_too_many_batches_set_aside_is_held_alone_until_an_operator_removes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches the store refuses after they were acknowledged are set aside, never dropped, and count in
    the journal's bound: one host repeating them (a compromised agent, a hole in the edge checks) would fill
    it and every host would be answered 503. Past MAX_SET_ASIDE_PER_HOST that host alone is answered 503
    `held` (a long Retry-After, its batches kept in its spool) until an operator removes the files."""
    directory = tmp_path / "controller.duckdb.journal"
    directory.mkdir(mode=0o700)
    earlier = Journal.open(directory)  # what an earlier run set aside for node-a
    refused = [JournalEntry("node-a", encode(batch("node-a", 900 + i)), True, time.time()) for i in range(16)]
    for entry_id, entry in zip(earlier.append_many(refused), refused, strict=True):
        earlier.set_aside(entry_id, entry, "refused by the store")
    earlier.close()
    assert len(refused) == ingest.MAX_SET_ASIDE_PER_HOST
    controller = start_test_controller(tmp_path)
    try:
        held = controller.ship(batch("node-a", 1))
        assert (held.status, held.doc["reason"]) == (503, "held")
        assert "16 batches of this host were refused by the store" in held.doc["error"]
        assert int(held.headers["Retry-After"]) >= 60
        assert controller.ship(batch("node-b", 1)).status == 200  # the other hosts are not held
        metrics = controller.metrics()
        assert 'fleetguard_controller_batches_refused_total{reason="held"} 1' in metrics
        fleet = controller.get("/v1/fleet", controller.tokens["operator"]).doc
        assert (fleet["ingest"]["held_hosts"], fleet["ingest"]["held_hosts_count"]) == (["node-a"], 1)
        said = render_status({"fleet": fleet, "hosts": [], "findings": []})
        assert "held      1 host whose batches the store refused" in said
        assert said.split("held      ")[1].splitlines()[0].endswith("their batches wait): node-a")
        for path in directory.glob("*.refused"):  # an operator has looked at them
            path.unlink()
        monkeypatch.setattr(journal_module, "RECOUNT_SECONDS", 0.0)
        # named no longer as soon as the files are gone, before node-a sends again
        assert controller.get("/v1/fleet", controller.tokens["operator"]).doc["ingest"]["held_hosts"] == []
        taken = controller.ship(batch("node-a", 1))
        assert (taken.status, taken.doc["duplicate"]) == (200, False)
        assert controller.get("/v1/fleet", controller.tokens["operator"]).doc["ingest"]["held_hosts"] == []
    finally:
        controller.running.stop()
    assert _stored(tmp_path / "controller.duckdb", "node-a") == 1
