"""IngestWriter.call: work for the writer thread from other threads (the repair loop, command queuing) runs
there, and never holds a shutdown up once the writer has stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.clock import FakeClock
from fleetguard.controller.ingest import IngestWriter
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import BatchRefused
from fleetguard.store import Store


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[IngestWriter]:
    with Store.open(tmp_path / "s.duckdb") as store:
        w = IngestWriter(store, FakeClock(1_800_000_000.0), ControllerStats())
        w.start()
        try:
            yield w
        finally:
            w.stop()


def test_call_runs_on_the_writer_thread(writer: IngestWriter) -> None:
    seen: list[str] = []
    writer.call(lambda: seen.append(threading.current_thread().name))
    assert seen and seen[0].startswith("fleetguard-ingest-")


def test_call_raises_what_the_work_raised(writer: IngestWriter) -> None:
    def boom() -> None:
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        writer.call(boom)


def test_call_after_the_writer_stopped_is_refused_at_once_not_after_its_timeout(writer: IngestWriter) -> None:
    writer.stop()
    started = time.monotonic()
    with pytest.raises(BatchRefused, match="stopping"):
        writer.call(lambda: None, timeout=30.0)
    assert time.monotonic() - started < 5.0


def test_a_call_does_not_wait_behind_a_paced_rounds_rests(tmp_path: Path) -> None:
    """The diagnosis round holds the store's lock while it rests (fleetguard.pacing); a call's work (queuing a
    command, a repair's end) takes that lock on lane 0, whose batches wait behind it. While a call waits the
    round does not rest, so the call waits for the round's work only, not its rests (here ~100 s of them)."""
    from fleetguard.clock import SystemClock
    from fleetguard.pacing import Pacer

    cpu = [0.0]
    pacer = Pacer(slice_seconds=1, max_rest_seconds=0.05, cpu_clock=lambda: cpu[0])
    rounds: list[int] = []
    resting = threading.Event()

    def round_(_con: object, _now: float) -> None:
        if rounds:
            return
        pacer.start(budget_seconds=10_000)
        for _ in range(2000):
            cpu[0] += 1.0
            resting.set()
            pacer.rest()
        rounds.append(1)

    with Store.open(tmp_path / "s.duckdb") as store:
        w = IngestWriter(store, SystemClock(), ControllerStats())
        pacer.wanted = w.calls_waiting
        w.on_stopping.append(pacer.hurry)
        w.every(0.01, "a paced round", round_)
        w.start()
        try:
            assert resting.wait(20), "the round never ran"

            def write() -> None:
                with store.transaction() as con:  # as queue_command's work does
                    con.execute("SELECT 1")

            w.call(write, timeout=20)
            assert rounds == [1], "the round ended first (it held the lock)"
            assert pacer.rested < 50, "it stopped resting once the call waited"
        finally:
            w.stop()


def test_a_controllers_diagnosis_round_gives_way_to_writer_calls_and_to_its_stop(tmp_path: Path) -> None:
    """The wiring of the two above in a real controller: its round's pacer asks the writer whether a call
    waits, and the writer's stop hurries it."""
    from fleetguard.pacing import Pacer
    from tests.controller.helpers import start_test_controller

    c = start_test_controller(tmp_path)
    try:
        writer = c.running.writer
        pacers = [getattr(h, "__self__", None) for h in writer.on_stopping]
        [pacer] = [p for p in pacers if isinstance(p, Pacer)]
        assert pacer.wanted == writer.calls_waiting
    finally:
        c.running.stop()
    slept: list[float] = []
    pacer.sleep, pacer.cpu_clock = slept.append, lambda: 1_000.0 + len(slept)
    pacer.start(budget_seconds=10_000)
    pacer.cpu_clock = lambda: 2_000.0  # a whole second of CPU since: a rest is due
    pacer.rest()
    assert slept == [], "stopped: it rests no more"
