"""The agent: rounds, buffering, flushing, failure isolation and shutdown (fake clock, real store)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from collectors.event_dedup import EventDeduplicator
from fleetguard.agent.agent import Agent, RoundReport, Schedule
from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import FakeClock
from fleetguard.records.telemetry import Event, EventKind, GpuSample
from fleetguard.store import Store
from tests.agent.fakes import ResumableStream, ScriptedCollector


def make_agent(
    store: Store,
    *collectors: ScriptedCollector | ResumableStream,
    clock: FakeClock | None = None,
    rejected: Path | None = None,
    **kwargs: Any,
) -> Agent:
    buffer = WriteBuffer(store, rejected)
    return Agent(list(collectors), buffer, MetricsState(), clock or FakeClock(), **kwargs)


def test_a_round_buffers_every_sample_and_a_flush_stores_them(store: Store) -> None:
    agent = make_agent(store, ScriptedCollector(gpus=8))
    agent.sample_round()
    assert store.counts()["gpu_samples"] == 0  # batched: nothing written until the flush
    assert agent.flush() == 8
    assert store.counts()["gpu_samples"] == 8


def test_a_failing_collector_does_not_stop_the_others(store: Store) -> None:
    broken, healthy = ScriptedCollector("broken"), ScriptedCollector("healthy", host="h2")
    broken.fail_next = 1
    agent = make_agent(store, broken, healthy)
    report = agent.sample_round()
    agent.flush()
    assert report.failed == ["broken"]
    assert agent.metrics.stats.collector_errors == {"broken": 1}
    assert store.connection.execute("SELECT DISTINCT host FROM gpu_samples").fetchall() == [("h2",)]


def test_rows_survive_a_failed_store_write_and_land_on_the_next_flush(store: Store, tmp_path: Path) -> None:
    agent = make_agent(store, ScriptedCollector(gpus=4))
    agent.sample_round()
    original = store.append
    calls = {"n": 0}

    def broken_append(records: object) -> int:
        calls["n"] += 1
        raise duckdb.IOException('IO Error: Could not write file "agent.duckdb.wal": Input/output error')

    store.append = broken_append  # type: ignore[method-assign]
    assert agent.flush() == 0
    assert len(agent.buffer) == 4  # kept, not dropped
    store.append = original  # type: ignore[method-assign]
    assert agent.flush() == 4
    assert store.counts()["gpu_samples"] == 4
    assert agent.metrics.stats.store_write_errors == 1


def test_a_poison_record_is_set_aside_and_the_rest_is_stored(store: Store, tmp_path: Path) -> None:
    rejected = tmp_path / "rejected.jsonl"
    agent = make_agent(store, ScriptedCollector(gpus=3), rejected=rejected)
    agent.sample_round()
    agent.submit([GpuSample(ts=1.0, host="h", gpu_index="bad", uuid="x")])  # type: ignore[arg-type]
    assert agent.flush() == 3
    assert store.counts()["gpu_samples"] == 3
    assert agent.buffer.rejected_rows == 1
    assert '"gpu_index": "bad"' in rejected.read_text()


class CountingFolder:
    """Folds every repeat of (kind, code) until drained with force."""

    window_seconds = 60.0

    def __init__(self) -> None:
        self.held: dict[tuple[str, int | None], Event] = {}

    def add(self, event: Event) -> list[Event]:
        key = (event.kind, event.code)
        if key in self.held:
            self.held[key] = dataclasses.replace(self.held[key], count=self.held[key].count + 1)
            return []
        self.held[key] = event
        return []

    def drain(self, now: float, force: bool = False) -> list[Event]:
        if not force:
            return []
        out, self.held = list(self.held.values()), {}
        return out


def test_shutdown_releases_folded_events_flushes_and_closes_collectors(store: Store) -> None:
    collector = ScriptedCollector(gpus=1)
    collector.emit(Event(1.0, "h", EventKind.XID, "test", "Xid 13", code=13))
    collector.emit(Event(1.5, "h", EventKind.XID, "test", "Xid 13", code=13))
    folder = CountingFolder()
    agent = make_agent(store, collector, folder=folder)
    agent.sample_round()
    assert store.counts()["events"] == 0
    agent.shutdown()
    assert store.connection.execute("SELECT code, count FROM events").fetchall() == [(13, 2)]
    assert store.counts()["gpu_samples"] == 1
    assert collector.closed


def test_the_loop_keeps_a_fixed_schedule_and_stops_when_asked(store: Store) -> None:
    clock = FakeClock()
    stop = threading.Event()
    reports: list[RoundReport] = []

    def on_round(report: RoundReport) -> None:
        reports.append(report)
        clock.advance(1.0)
        if len(reports) == 5:
            stop.set()

    agent = make_agent(
        store,
        ScriptedCollector(gpus=2),
        clock=clock,
        on_round=on_round,
        schedule=Schedule(sample_interval_seconds=1.0, flush_interval_seconds=2.0),
    )
    agent.run(stop)
    agent.shutdown()
    assert len(reports) == 5
    assert [r.ts - reports[0].ts for r in reports] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert store.counts()["gpu_samples"] == 10


def test_retention_cuts_by_the_agents_clock_and_keeps_what_that_clock_just_stored(store: Store) -> None:
    """The CI failure of 2026-11-27: a daemon on a FakeClock (2023) had its first flush deleted by a retention
    pass that cut by the machine's clock (2026), whenever the writer thread ran both in one wake."""
    clock = FakeClock()
    stop = threading.Event()
    cut_at: list[float] = []
    retained = threading.Event()

    def retain(days: float, now: float) -> None:
        cut_at.append(now)
        store.apply_retention(days, now=now)
        retained.set()

    def on_round(report: RoundReport) -> None:
        if report.ts - FakeClock().time() >= 2.0:  # the loop asks for retention after its first round
            assert retained.wait(30.0)  # ... and the writer thread's pass has run before time moves on
        clock.advance(1.0)
        if report.ts - FakeClock().time() >= 4.0:
            stop.set()

    agent = make_agent(
        store,
        ScriptedCollector(gpus=2),
        clock=clock,
        on_round=on_round,
        apply_retention=retain,
        schedule=Schedule(flush_interval_seconds=1.0, retention_days=7.0, retention_interval_seconds=1.0),
    )
    agent.sample_round()
    agent.flush()  # rows of the fake clock's time are in the store before any retention pass
    agent.run(stop)
    agent.shutdown()
    assert cut_at and all(FakeClock().time() <= now <= clock.time() for now in cut_at)
    assert store.counts()["gpu_samples"] == 2 * 5  # the round before the loop and four in it


def test_events_reach_the_round_report_once(store: Store) -> None:
    collector = ScriptedCollector(gpus=0)
    collector.emit(Event(1.0, "h", EventKind.XID, "test", "Xid 79", code=79))
    seen: list[RoundReport] = []
    agent = make_agent(store, collector, on_round=seen.append)
    agent.sample_round()
    agent.sample_round()
    assert [len(r.events) for r in seen] == [1, 0]


def store_fails(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def append(records: object) -> int:
        raise duckdb.IOException('IO Error: Could not write file "agent.duckdb.wal": Input/output error')

    monkeypatch.setattr(store, "append", append)


def test_the_loop_keeps_running_when_a_flush_raises(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    stop = threading.Event()
    rounds: list[RoundReport] = []

    def on_round(report: RoundReport) -> None:
        rounds.append(report)
        clock.advance(1.0)
        if len(rounds) == 5:
            stop.set()

    agent = make_agent(
        store,
        ScriptedCollector(),
        clock=clock,
        on_round=on_round,
        schedule=Schedule(sample_interval_seconds=1.0, flush_interval_seconds=1.0),
    )

    def flush() -> int:
        raise RuntimeError("a bug in the buffer")

    monkeypatch.setattr(agent.buffer, "flush", flush)
    agent.run(stop)
    assert len(rounds) == 5


def test_rows_the_store_never_took_are_logged_as_lost_at_shutdown(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(store, ScriptedCollector(gpus=3))
    agent.sample_round()
    store_fails(store, monkeypatch)
    with caplog.at_level(logging.ERROR):
        agent.shutdown()
    assert "3 rows could not be stored before shutdown" in caplog.text


def test_a_stream_position_is_committed_only_after_the_flush_that_stores_its_events(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = ResumableStream()
    agent = make_agent(store, stream)
    stream.emit_xid(1.0, 79)
    stream.emit_xid(2.0, 48)
    agent.sample_round()
    assert stream.commits == []  # read, not stored yet
    with monkeypatch.context() as m:
        store_fails(store, m)
        agent.flush()
    assert stream.commits == []
    agent.flush()
    assert stream.commits == [2]


def test_a_stream_position_waits_for_the_repeats_the_folder_holds_back(store: Store) -> None:
    clock = FakeClock()
    stream = ResumableStream()
    agent = make_agent(store, stream, clock=clock, folder=EventDeduplicator(window_seconds=60.0))
    stream.emit_xid(clock.time(), 79)
    stream.emit_xid(clock.time() + 1, 79)  # a repeat: held until its window closes
    agent.sample_round()
    agent.flush()
    assert stream.commits == []
    clock.advance(60.0)
    agent.sample_round()
    agent.flush()
    assert stream.commits == [2]
    assert store.connection.execute("SELECT sum(count) FROM events").fetchall() == [(2,)]
