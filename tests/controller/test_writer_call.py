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
