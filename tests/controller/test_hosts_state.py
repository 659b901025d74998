"""Hosts' state: a host heard for the first time is stored with its batch; a known host's state is written
from memory about once a second; after a crash between those writes, the ledger (written with every batch)
brings each host's last sign of life back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.clock import FakeClock
from fleetguard.controller.hosts import load_hosts
from fleetguard.controller.ingest import IngestWriter, Pending
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import IngestBatch, parse_batch
from fleetguard.store import Store
from tests.controller.helpers import batch

NOW = 1_795_000_000.0


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s.duckdb"


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    with Store.open(path) as s:
        yield s


def _checked(host: str, seq: int, boot_id: str = "boot-1") -> IngestBatch:
    doc = batch(host, seq, boot_id=boot_id, ts=NOW).to_json()
    return parse_batch(json.dumps(doc).encode(), host, compressed=False, now=NOW + 60)


def _commit(writer: IngestWriter, *batches: IngestBatch) -> None:
    group = [Pending(b, 0.0) for b in batches]
    writer.commit_group(group)
    for p in group:
        assert p.done.is_set() and p.error is None, p.error


def _stored(store: Store) -> dict[str, tuple[str, float, int, int]]:
    rows = store.connection.execute(
        "SELECT host, boot_id, epoch(last_seen), last_seq, batches FROM fleet_hosts"
    ).fetchall()
    return {str(r[0]): (str(r[1]), float(r[2]), int(r[3]), int(r[4])) for r in rows}


def test_a_host_heard_for_the_first_time_is_stored_in_the_commit_of_its_batch(store: Store) -> None:
    writer = IngestWriter(store, FakeClock(NOW), ControllerStats())
    _commit(writer, _checked("node-a", 1), _checked("node-b", 1))
    assert _stored(store) == {"node-a": ("boot-1", NOW, 1, 1), "node-b": ("boot-1", NOW, 1, 1)}


def test_a_known_hosts_state_is_written_by_the_flush_and_read_from_memory_meanwhile(store: Store) -> None:
    clock = FakeClock(NOW)
    writer = IngestWriter(store, clock, ControllerStats())
    _commit(writer, _checked("node-a", 1))
    clock.advance(5.0)
    _commit(writer, _checked("node-a", 2))
    (state,) = writer.host_states()
    assert (state.last_seen, state.last_seq, state.batches) == (NOW + 5.0, 2, 2)
    with store.transaction() as con:
        writer.flush_hosts(con, clock.time())
    assert _stored(store) == {"node-a": ("boot-1", NOW + 5.0, 2, 2)}


def test_stopping_the_writer_writes_every_hosts_newest_state(store: Store) -> None:
    clock = FakeClock(NOW)
    writer = IngestWriter(store, clock, ControllerStats())
    writer.start()
    try:
        for seq in (1, 2, 3):
            pending = writer.submit(_checked("node-a", seq))
            assert pending.done.wait(30) and pending.error is None
            clock.advance(5.0)
    finally:
        writer.stop()
    assert _stored(store)["node-a"] == ("boot-1", NOW + 10.0, 3, 3)


def test_after_a_crash_between_flushes_the_ledger_gives_each_hosts_last_sign_of_life(path: Path) -> None:
    clock = FakeClock(NOW)
    with Store.open(path) as store:
        writer = IngestWriter(store, clock, ControllerStats())
        _commit(writer, _checked("node-a", 1), _checked("node-b", 7))
        clock.advance(5.0)
        _commit(writer, _checked("node-a", 2))
        clock.advance(5.0)
        _commit(writer, _checked("node-b", 1, boot_id="boot-2"))  # node-b's agent restarted
        # No flush, no stop: the process dies here with fleet_hosts as first written.
        assert _stored(store)["node-a"][1] == NOW
    with Store.open(path) as store:
        hosts = load_hosts(store.connection)
    a, b = hosts["node-a"], hosts["node-b"]
    assert (a.boot_id, a.last_seen, a.last_seq) == ("boot-1", NOW + 5.0, 2)
    assert (b.boot_id, b.last_seen, b.last_seq) == ("boot-2", NOW + 10.0, 1)
