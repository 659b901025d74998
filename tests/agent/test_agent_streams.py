"""Streams and the store never hold up sampling: backlogs are read within a per-round budget, a kernel log
that is a regular file or a FIFO whose writer left does not spin the loop, flushes run on their own thread."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from collectors.kmsg import KmsgCollector
from fleetguard.agent.agent import Agent, RoundReport, Schedule
from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import FakeClock
from fleetguard.records.telemetry import Batch, Event, EventKind
from fleetguard.store import Store
from tests.agent.fakes import ScriptedCollector

BOOT = 1_700_000_000.0
WAIT_SECONDS = 30.0


class Flood:
    """A stream with an endless backlog; each collect handles one slice and takes `seconds` of the clock."""

    name = "flood"

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.collects: list[float] = []

    @property
    def has_backlog(self) -> bool:
        return True

    def collect(self, now: float) -> Batch:
        self.collects.append(self.clock.monotonic())
        self.clock.advance(self.seconds)
        return Batch(events=[Event(now, "h", EventKind.XID, "kmsg", "Xid 79", code=79, count=5_000)])

    def problems(self) -> Mapping[str, int]:
        return {}

    def close(self) -> None:
        pass


def test_an_endless_backlog_is_read_between_rounds_only_within_the_stream_budget(store: Store) -> None:
    clock = FakeClock()
    flood = Flood(clock, seconds=0.125)
    reports: list[RoundReport] = []
    stop = threading.Event()

    def on_round(report: RoundReport) -> None:
        reports.append(report)
        clock.advance(0.5)  # the rest of the round's own work; the flood's slices take 0.125 s each
        if len(reports) == 6:
            stop.set()

    agent = Agent(
        [ScriptedCollector(gpus=1), flood],
        WriteBuffer(store),
        MetricsState(),
        clock,
        schedule=Schedule(sample_interval_seconds=1.0, flush_interval_seconds=5.0, stream_seconds=0.375),
        on_round=on_round,
    )
    agent.run(stop)
    agent.shutdown()
    starts = [r.ts - reports[0].ts for r in reports]
    assert starts == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])  # 1 Hz, however big the backlog
    # Per second: one slice in the round itself, then three while the 0.375 s budget lasts (the round after
    # starts when the budget is spent, exactly on time).
    gaps = [b - a for a, b in zip(flood.collects, flood.collects[1:], strict=False)]
    assert 5 * (1 + 3) < len(flood.collects) <= 6 * (1 + 3)  # the last round's slices end with the loop
    assert gaps == pytest.approx(([0.625, 0.125, 0.125, 0.125] * 6)[: len(gaps)])


def test_a_kernel_log_that_is_a_regular_file_is_read_once_per_round(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """select() calls a regular file readable at its end: today the loop read it again and again."""
    path = tmp_path / "kmsg"
    path.write_text("4,1,300000000,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=7, name=python3, fell off\n")
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("b\n")
    collector = KmsgCollector("h", str(path), boot_time=BOOT, boot_id_path=str(boot_id))
    collects: list[float] = []
    real_collect = collector.collect

    def counted(now: float) -> Batch:
        collects.append(now)
        return real_collect(now)

    monkeypatch.setattr(collector, "collect", counted)
    clock = FakeClock(BOOT + 1_000)
    reports: list[RoundReport] = []
    stop = threading.Event()

    def on_round(report: RoundReport) -> None:
        reports.append(report)
        clock.advance(1.0)
        if len(reports) == 4:
            stop.set()

    agent = Agent([collector], WriteBuffer(store), MetricsState(), clock, on_round=on_round)
    agent.run(stop)
    agent.shutdown()
    assert len(collects) == 4 + 1  # four rounds and shutdown's last read
    assert store.counts()["events"] == 1


def test_sampling_keeps_its_schedule_while_a_flush_is_stuck(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused batch was retried row by row on the sampling loop: sampling stopped for minutes."""
    entered = threading.Event()
    release = threading.Event()
    real_append = store.append

    def stuck(records: object) -> int:
        entered.set()
        release.wait(WAIT_SECONDS)
        return real_append(records)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append", stuck)
    clock = FakeClock()
    reports: list[RoundReport] = []
    stop = threading.Event()

    def on_round(report: RoundReport) -> None:
        reports.append(report)
        if len(reports) == 3:
            assert entered.wait(WAIT_SECONDS)  # the writer thread is inside a flush that does not return
        clock.advance(1.0)
        if len(reports) == 10:
            stop.set()

    agent = Agent(
        [ScriptedCollector(gpus=2)],
        WriteBuffer(store),
        MetricsState(),
        clock,
        schedule=Schedule(sample_interval_seconds=1.0, flush_interval_seconds=1.0),
        on_round=on_round,
    )
    loop = threading.Thread(target=agent.run, args=(stop,))
    loop.start()
    loop.join(WAIT_SECONDS)
    stuck_while_sampling = not release.is_set()
    release.set()
    assert not loop.is_alive()
    assert stuck_while_sampling and len(reports) == 10
    agent.shutdown()
    assert store.counts()["gpu_samples"] == 20


def test_shutdown_waits_for_the_flush_in_progress_then_stores_the_rest(store: Store) -> None:
    clock = FakeClock()
    stop = threading.Event()
    rounds: list[RoundReport] = []

    def on_round(report: RoundReport) -> None:
        rounds.append(report)
        clock.advance(1.0)
        if len(rounds) == 5:
            stop.set()

    agent = Agent(
        [ScriptedCollector(gpus=3)],
        WriteBuffer(store),
        MetricsState(),
        clock,
        schedule=Schedule(sample_interval_seconds=1.0, flush_interval_seconds=1.0),
        on_round=on_round,
    )
    agent.run(stop)
    assert agent.shutdown() >= 0
    assert store.counts()["gpu_samples"] == 15
    assert not [t for t in threading.enumerate() if t.name == "fleetguard-writer"]
