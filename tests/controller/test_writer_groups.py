"""The writer's groups: a lane commits a batch on a quiet lane at once, gathers the batches that arrive within
its window into one commit, and stores NULLs of float and time columns as NULL (not NaN)."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.clock import FakeClock
from fleetguard.controller import ingest
from fleetguard.controller.ingest import IngestWriter, Pending
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import IngestBatch, parse_batch
from fleetguard.store import Store
from tests.controller.helpers import batch

NOW = 1_795_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s.duckdb") as s:
        yield s


def _checked(host: str, seq: int, *, doubles: list[float | None] | None = None) -> IngestBatch:
    doc = batch(host, seq, ts=NOW).to_json()
    if doubles is not None:
        doc["tables"]["gpu_samples"]["power_watts"] = doubles  # type: ignore[index]
        doc["tables"]["gpu_samples"]["slow_read_ts"] = [None if d is None else NOW for d in doubles]  # type: ignore[index]
    return parse_batch(json.dumps(doc).encode(), host, compressed=False, now=NOW)


def _committed(pending: Pending) -> None:
    assert pending.done.wait(30), "not committed"
    assert pending.error is None, pending.error


def test_a_batch_on_a_quiet_lane_commits_at_once_and_later_ones_gather_in_its_window(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long window: the three batches sent just after the first commit surely arrive within it.
    monkeypatch.setattr(ingest, "GROUP_WINDOW_SECONDS", 2.0)
    stats = ControllerStats()
    writer = IngestWriter(store, FakeClock(NOW), stats, lanes=1)
    writer.start()
    try:
        first = writer.submit(_checked("node-a", 1))
        _committed(first)
        assert sum(stats.commit_counts) == 1
        later = [writer.submit(_checked(h, 1)) for h in ("node-b", "node-c", "node-d")]
        for pending in later:
            _committed(pending)
    finally:
        writer.stop()
    assert sum(stats.commit_counts) == 2, "the three batches in the window were one commit"
    assert stats.batches_committed == 4


def test_a_call_ends_a_lanes_gathering_rather_than_wait_out_its_window(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued call (a command, a repair's end, `wait_committed`'s wake-up) has somebody waiting on it: the
    batches gathered before it are committed and it runs, whatever is left of the window. With a window of a
    minute, the call below would otherwise time out."""
    monkeypatch.setattr(ingest, "GROUP_WINDOW_SECONDS", 60.0)
    stats = ControllerStats()
    writer = IngestWriter(store, FakeClock(NOW), stats, lanes=1)
    writer.start()
    ran = threading.Event()
    try:
        _committed(writer.submit(_checked("node-a", 1)))  # a quiet lane: at once, and its window starts
        gathered = writer.submit(_checked("node-b", 1))  # now gathered for the window
        writer.call(ran.set, timeout=20)
        assert ran.is_set()
        assert gathered.done.is_set() and gathered.error is None, (
            "the batch before the call is committed first"
        )
        assert stats.batches_committed == 2
    finally:
        writer.stop()


def test_null_doubles_and_times_are_stored_as_null_beside_values(store: Store) -> None:
    writer = IngestWriter(store, FakeClock(NOW), ControllerStats())
    # One batch with a NULL among values, one with values only, one with NULLs only: one group.
    group = [
        Pending(_checked("node-a", 1, doubles=[None, 250.5]), 0.0),
        Pending(_checked("node-b", 1, doubles=[100.0, 200.0]), 0.0),
        Pending(_checked("node-c", 1, doubles=[None, None]), 0.0),
    ]
    writer.commit_group(group)
    for pending in group:
        _committed(pending)
    rows = store.connection.execute(
        "SELECT host, gpu_index, power_watts, slow_read_ts IS NULL, isnan(power_watts) "
        "FROM gpu_samples ORDER BY host, gpu_index"
    ).fetchall()
    assert rows == [
        ("node-a", 0, None, True, None),
        ("node-a", 1, 250.5, False, False),
        ("node-b", 0, 100.0, False, False),
        ("node-b", 1, 200.0, False, False),
        ("node-c", 0, None, True, None),
        ("node-c", 1, None, True, None),
    ]


def test_a_periodic_task_under_way_holds_no_lanes_batches(store: Store) -> None:
    """The diagnosis round runs as one of the writer's periodic tasks, 0.2-0.5 s at 2,000 hosts: batches
    arriving meanwhile, on every lane, are committed without waiting for it to end."""
    clock = FakeClock(NOW)
    writer = IngestWriter(store, clock, ControllerStats())
    started, release = threading.Event(), threading.Event()
    ran_on: list[str] = []

    def slow_round(_con: object, _now: float) -> None:
        ran_on.append(threading.current_thread().name)
        started.set()
        release.wait(30)

    writer.every(1.0, "a slow round", slow_round)
    hosts = [f"node-{i}" for i in range(8)]
    assert {zlib.crc32(h.encode()) % ingest.WRITER_LANES for h in hosts} == set(range(ingest.WRITER_LANES))
    writer.start()
    try:
        clock.advance(1.0)
        assert started.wait(30), "the task never ran"
        for pending in [writer.submit(_checked(h, 1)) for h in hosts]:
            _committed(pending)
        assert not release.is_set()  # every batch above was committed while the round was still running
    finally:
        release.set()
        writer.stop()
    assert ran_on == ["fleetguard-writer-tasks"]
    assert store.connection.execute("SELECT count(DISTINCT host) FROM gpu_samples").fetchone() == (8,)


def test_a_stop_asks_a_resting_task_to_finish_rather_than_wait_behind_it(store: Store) -> None:
    """A paced round rests between slices (fleetguard.pacing); the writer's stop hurries it, so neither the
    stop nor the store's lock the round holds waits out its rests."""
    from fleetguard.clock import SystemClock
    from fleetguard.pacing import Pacer

    cpu = [0.0]
    pacer = Pacer(slice_seconds=1, max_rest_seconds=10_000, cpu_clock=lambda: cpu[0])
    resting = threading.Event()
    slices: list[int] = []

    def round_(_con: object, _now: float) -> None:
        pacer.start(budget_seconds=10_000)
        for n in range(5):  # each rest would be 300 s unhurried: past the stop's wait for the task thread
            cpu[0] += 100.0
            resting.set()
            pacer.rest()
            slices.append(n)

    writer = IngestWriter(store, SystemClock(), ControllerStats())
    writer.on_stopping.append(pacer.hurry)
    writer.every(0.01, "a paced round", round_)
    writer.start()
    assert resting.wait(20), "the round never ran"
    writer.stop()
    assert writer._tasks_thread is not None and not writer._tasks_thread.is_alive()
    assert slices == [0, 1, 2, 3, 4], "the round ran to its end, without its rests"
