"""The agent loop: sample on a monotonic schedule, read streams as they arrive, buffer, flush, stop.

Flushes and retention run on a writer thread of their own: a slow or refusing store never holds up sampling
or shutdown's signal handling."""

from __future__ import annotations

import logging
import math
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, runtime_checkable

from collectors.protocol import Collector
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import Clock
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Batch, Event, EventKind

log = logging.getLogger(__name__)


class RowBuffer(Protocol):
    """Where rows wait for the next flush: the local store's WriteBuffer (fleetguard.agent.buffer), or the
    spool of an agent that ships to a controller (fleetguard.shipping.spool_buffer)."""

    rows_written: dict[str, int]
    write_errors: int
    dropped_rows: int
    rejected_rows: int

    def add(self, rows: Iterable[object]) -> None: ...

    def after_stored(self, callback: Callable[[], None]) -> None: ...

    def flush(self) -> int: ...

    def __len__(self) -> int: ...


class EventFolder(Protocol):
    """Folds repeats of the same event into one stored row (see collectors.event_dedup).

    A repeat that `add` holds back is released by the first `drain(now)` at least `window_seconds` after it
    was added (the events' times never run ahead of the agent's clock)."""

    window_seconds: float

    def add(self, event: Event) -> list[Event]: ...

    def drain(self, now: float, force: bool = False) -> list[Event]: ...


@runtime_checkable
class Resumable(Protocol):
    """A stream collector that resumes after a restart from the last record whose events are stored
    (collectors.kmsg): the agent tells it how far that is, after the flush that stored them."""

    @property
    def last_seq(self) -> int | None:
        """The sequence number of the last record read."""

    def commit(self, seq: int) -> None:
        """Events of every record up to `seq` are stored."""


@runtime_checkable
class Backlogged(Protocol):
    """A stream collector that handles a bounded slice per collect (collectors.kmsg, collectors.nccl) and
    says when more is waiting: the agent calls it again between rounds, within `Schedule.stream_seconds`."""

    @property
    def has_backlog(self) -> bool: ...


@dataclass(frozen=True)
class _Checkpoint:
    collector: Resumable
    seq: int
    ready_at: float  # clock time by which every event read up to `seq` has left the folder for the buffer


@dataclass(frozen=True)
class Schedule:
    sample_interval_seconds: float = 1.0
    flush_interval_seconds: float = 5.0
    retention_days: float | None = None
    retention_interval_seconds: float = 3600.0
    # Time streams may take between two rounds (kernel-log storm, log flood): the rest waits for the next
    # round, so sampling keeps its rate whatever arrives.
    stream_seconds: float = 0.3


@dataclass
class RoundReport:
    """What one call of `sample_round` did, for status lines and tests."""

    ts: float
    rows: int
    cpu_seconds: float
    failed: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # as stored (repeats folded), since the last report


class Agent:
    """Owns the collectors, the write buffer and the metrics state; all I/O and threads live here."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        buffer: RowBuffer,
        metrics: MetricsState,
        clock: Clock,
        folder: EventFolder | None = None,
        schedule: Schedule | None = None,
        apply_retention: Callable[[float, float], object] | None = None,
        on_round: Callable[[RoundReport], None] | None = None,
        wait: Waiter | None = None,
    ) -> None:
        self.collectors = list(collectors)
        self.buffer = buffer
        self.metrics = metrics
        self.clock = clock
        self.folder = folder
        self.schedule = schedule or Schedule()
        self._apply_retention = apply_retention
        self._on_round = on_round
        self._wait = wait or wait_on_poll
        self._streams = [c for c in self.collectors if _fileno(c) is not None]
        self._periodic = [c for c in self.collectors if _fileno(c) is None]
        self._error_logged: set[str] = set()
        self._unreported_events: list[Event] = []
        self._resumable = {id(c): c for c in self.collectors if isinstance(c, Resumable)}
        self._read_seqs: dict[int, int] = {}  # id(collector) -> last sequence number checkpointed
        self._just_read: list[tuple[Resumable, int]] = []
        self._checkpoints: deque[_Checkpoint] = deque()
        self._writer: _Writer | None = None
        self._backlogged = [c for c in self.collectors if isinstance(c, Backlogged)]
        self._stream_seconds_left = self.schedule.stream_seconds
        # Parts of the process that need the events as they are read (the training runtime's host evidence),
        # before repeats are folded: called on the sampling thread, so each must be quick and not raise.
        self.event_taps: list[Callable[[Sequence[Event]], None]] = []
        # Called after a flush that stored rows (the incidents loop evaluates new records at once).
        self.on_stored: list[Callable[[], None]] = []
        for c in self.collectors:
            metrics.set_collector_up(c.name, True)

    # ---- one step each; the loop below only decides when ---------------------------------------------

    def sample_round(self) -> RoundReport:
        """Collect once from every periodic collector (and drain streams), then buffer and count."""
        cpu0 = time.thread_time()
        now = self.clock.time()
        batch = Batch()
        failed = self._collect_into(batch, self._periodic + self._streams, now)
        self._ingest(batch, now)
        cpu = time.thread_time() - cpu0
        stats = self.metrics.stats
        stats.rounds += 1
        stats.round_cpu_seconds += cpu
        stats.buffered_rows = len(self.buffer)
        self.metrics.round_done()
        report = RoundReport(now, len(batch), cpu, failed, self._unreported_events)
        self._unreported_events = []
        if self._on_round is not None:
            self._on_round(report)
        return report

    def read_streams(self, ready: Iterable[Collector]) -> None:
        """Read stream collectors that select() found readable (or that have a backlog), between rounds; the
        time it takes is spent from this round's stream budget."""
        start = self.clock.monotonic()
        now = self.clock.time()
        batch = Batch()
        self._collect_into(batch, list(ready), now)
        self._ingest(batch, now)
        self._stream_seconds_left -= self.clock.monotonic() - start

    def _with_backlog(self) -> list[Collector]:
        return [c for c in self._backlogged if c.has_backlog]  # type: ignore[misc]

    def submit(self, records: Iterable[object]) -> None:
        """Records from other parts of the process (training runtime, predictor): buffered like samples; a
        finding among them is flushed at once, as events are."""
        rows = list(records)
        self.buffer.add(rows)
        if any(isinstance(r, Finding) for r in rows):
            self._flush_soon()

    def _flush_soon(self) -> None:
        """A fault is in the buffer: store it now, not at the next flush interval (fault-to-page latency)."""
        if self._writer is not None:
            self._writer.request_flush()

    def flush(self) -> int:
        try:
            written = self.buffer.flush()
        except Exception:
            # The buffer keeps what it could not write; whatever went wrong, the daemon keeps sampling.
            log.exception("flushing the write buffer failed")
            written = 0
        stats = self.metrics.stats
        stats.rows_written = dict(self.buffer.rows_written)
        stats.store_write_errors = self.buffer.write_errors
        stats.buffered_rows = len(self.buffer)
        stats.dropped_rows = self.buffer.dropped_rows
        stats.rejected_rows = self.buffer.rejected_rows
        if written:
            for callback in self.on_stored:
                try:
                    callback()
                except Exception as exc:  # a listener must not stop the agent storing rows
                    log.warning("after-store callback failed: %s", exc)
        return written

    def shutdown(self) -> int:
        """Last round of streams, every folded event released, everything flushed, collectors closed."""
        if self._writer is not None:
            self._writer.join(WRITER_JOIN_SECONDS)  # its flush is bounded in time; ours follows it
            self._writer = None
        now = self.clock.time()
        batch = Batch()
        streams = self._streams + [c for c in self._backlogged if c not in self._streams]  # type: ignore[misc]
        self._collect_into(batch, streams, now)  # one slice each: shutdown must stay prompt
        self._ingest(batch, now, force_drain=True)
        written = self.flush()
        if len(self.buffer):
            log.error(
                "%d rows could not be stored before shutdown and are lost (the store is failing: see above)",
                len(self.buffer),
            )
        for c in self.collectors:
            try:
                c.close()
            except Exception as exc:
                log.warning("closing collector %s failed: %s", c.name, exc)
        return written

    def _collect_into(self, batch: Batch, collectors: Sequence[Collector], now: float) -> list[str]:
        failed = []
        for c in collectors:
            try:
                batch.extend(c.collect(now))
                self._note_read(c)
            except Exception as exc:
                # A collector bug must not stop the others, nor the daemon.
                failed.append(c.name)
                errors = self.metrics.stats.collector_errors
                errors[c.name] = errors.get(c.name, 0) + 1
                if c.name not in self._error_logged:
                    self._error_logged.add(c.name)
                    log.exception("collector %s failed (logged once; counted in /metrics): %s", c.name, exc)
            self.metrics.set_problems(c.name, c.problems())
        return failed

    def _ingest(self, batch: Batch, now: float, force_drain: bool = False) -> None:
        self.metrics.observe(batch)
        if batch.events:
            for tap in self.event_taps:
                try:
                    tap(batch.events)
                except Exception:
                    log.exception("an event tap failed; sampling goes on")
        for e in batch.events:
            if e.kind == EventKind.GPU_LOST and e.gpu_index is not None:
                self.metrics.forget_gpu(e.host, e.gpu_index)
        stored_events: list[Event] = []
        held_back = False
        if self.folder is None:
            stored_events = batch.events
        else:
            for e in batch.events:
                released = self.folder.add(e)
                held_back = held_back or not any(r is e for r in released)
                stored_events.extend(released)
            stored_events.extend(self.folder.drain(now, force=force_drain))
        self.buffer.add(batch.gpu_samples)
        self.buffer.add(batch.nic_samples)
        self.buffer.add(batch.nic_counters)
        self.buffer.add(stored_events)
        if stored_events:
            self._flush_soon()
        if self._on_round is not None:
            self._unreported_events.extend(stored_events)
        self._checkpoint(now, held_back, force_drain)

    # ---- resuming streams: how far their records are stored --------------------------------------------

    def _note_read(self, collector: Collector) -> None:
        resumable = self._resumable.get(id(collector))
        if resumable is None:
            return
        seq = resumable.last_seq
        if seq is not None and seq != self._read_seqs.get(id(collector)):
            self._read_seqs[id(collector)] = seq
            self._just_read.append((resumable, seq))

    def _checkpoint(self, now: float, held_back: bool, all_released: bool) -> None:
        """Queue a commit behind the rows holding the events read so far. A repeat the folder holds back is
        not in the buffer yet, so the commit then waits until the folder must have released it."""
        delay = self.folder.window_seconds if held_back and self.folder is not None else 0.0
        for collector, seq in self._just_read:
            self._checkpoints.append(_Checkpoint(collector, seq, now + delay))
        self._just_read = []
        # In order: a later read must not commit past events of an earlier one that are still held back.
        while self._checkpoints and (all_released or self._checkpoints[0].ready_at <= now):
            checkpoint = self._checkpoints.popleft()
            self.buffer.after_stored(partial(checkpoint.collector.commit, checkpoint.seq))

    # ---- the loop -------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, wakeup_fd: int | None = None) -> None:
        """Run until `stop` is set. `wakeup_fd` (readable when stop is set, e.g. a signal wakeup pipe) makes
        shutdown immediate instead of waiting for the next tick."""
        writer = self._writer = _Writer(self.flush, self._retain)
        writer.start()
        try:
            self._loop(stop, wakeup_fd, writer)
        finally:
            writer.stop()  # shutdown() waits for it before its final flush

    def _retain(self) -> None:
        if self._apply_retention is None or not self.schedule.retention_days:
            return
        try:
            self._apply_retention(self.schedule.retention_days, self.clock.time())
        except Exception as exc:
            log.warning("retention failed: %s", exc)

    def _loop(self, stop: threading.Event, wakeup_fd: int | None, writer: _Writer) -> None:
        interval = self.schedule.sample_interval_seconds
        start = self.clock.monotonic()
        next_round = start
        next_flush = start + self.schedule.flush_interval_seconds
        next_retention = start
        rounds_skipped = 0
        while not stop.is_set():
            now = self.clock.monotonic()
            if now >= next_round:
                self.sample_round()
                self._stream_seconds_left = self.schedule.stream_seconds
                next_round += interval
                if self.clock.monotonic() > next_round + interval:
                    # Fell behind (suspended VM, slow disk): skip missed rounds rather than burst.
                    missed = int((self.clock.monotonic() - next_round) // interval)
                    rounds_skipped += missed
                    next_round += missed * interval
            if now >= next_flush:
                writer.request_flush()
                next_flush = now + self.schedule.flush_interval_seconds
            if now >= next_retention:
                writer.request_retention()
                next_retention = now + self.schedule.retention_interval_seconds
            self._wait_and_read(min(next_round, next_flush), wakeup_fd, stop)
        if rounds_skipped:
            log.info("skipped %d rounds while behind schedule", rounds_skipped)

    def _wait_and_read(self, until: float, wakeup_fd: int | None, stop: threading.Event) -> None:
        """Wait until `until` (monotonic), reading streams as they become readable while this round's stream
        budget lasts; a collector with a backlog is read at once, a spent budget waits for the next round."""
        streaming = self._stream_seconds_left > 0
        backlog = self._with_backlog() if streaming else []
        timeout = 0.0 if backlog else max(0.0, until - self.clock.monotonic())
        fds = {fd: c for c in self._streams if (fd := _fileno(c)) is not None} if streaming else {}
        wait_fds = list(fds) + ([wakeup_fd] if wakeup_fd is not None else [])
        readable = self._wait(wait_fds, timeout, stop)
        if wakeup_fd is not None and wakeup_fd in readable:
            _drain_fd(wakeup_fd)
        ready = [fds[fd] for fd in readable if fd in fds]
        ready += [c for c in backlog if c not in ready]
        if ready:
            self.read_streams(ready)


Waiter = Callable[[list[int], float, threading.Event], list[int]]
"""How the loop waits between rounds: (descriptors, seconds, stop) -> the descriptors that became readable."""


def wait_on_poll(fds: list[int], seconds: float, stop: threading.Event) -> list[int]:
    """The daemon's wait, in real time: until a descriptor is readable (the signal wakeup pipe among them),
    `stop` is set (when there is no descriptor to watch) or `seconds` pass."""
    if not fds:
        if seconds > 0:
            stop.wait(seconds)
        return []
    return poll_readable(fds, seconds)


def wait_on_clock(clock: Clock) -> Waiter:
    """A wait on `clock` (a FakeClock in tests): descriptors readable now are read at once, otherwise the loop
    waits until the clock has moved `seconds` on or `stop` is set. A descriptor that becomes readable while
    it waits is read when the clock next moves: in tests, time is what drives the loop."""

    def wait(fds: list[int], seconds: float, stop: threading.Event) -> list[int]:
        ready = poll_readable(fds, 0.0) if fds else []
        if ready or seconds <= 0:
            return ready
        clock.wait(stop, seconds)
        return poll_readable(fds, 0.0) if fds else []

    return wait


def poll_readable(fds: list[int], timeout_seconds: float) -> list[int]:
    """The descriptors among `fds` that are readable (or hung up: the reader sees EOF) within the timeout.
    poll(), not select(): select() cannot take a descriptor numbered 1024 or more, and the agent raises its
    open-file limit so that many held runtime connections cannot starve it of descriptors."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    try:
        events = poller.poll(math.ceil(timeout_seconds * 1000.0))
    except InterruptedError:
        return []
    return [fd for fd, _ in events]


# How long shutdown waits for a flush in progress on the writer thread (bounded by the buffer's own budget).
WRITER_JOIN_SECONDS = 30.0


class _Writer:
    """A thread that runs the flushes and retention the loop asks for, one at a time; asking again while one
    runs does not queue a second."""

    def __init__(self, flush: Callable[[], object], retain: Callable[[], None]) -> None:
        self._flush = flush
        self._retain = retain
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._flush_due = self._retention_due = self._stopping = False
        self._thread = threading.Thread(target=self._run, name="fleetguard-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request_flush(self) -> None:
        with self._lock:
            self._flush_due = True
        self._wake.set()

    def request_retention(self) -> None:
        with self._lock:
            self._retention_due = True
        self._wake.set()

    def stop(self) -> None:
        """Ask the thread to end after what it is doing; `join` waits for it."""
        with self._lock:
            self._stopping = True
        self._wake.set()

    def join(self, timeout: float) -> None:
        self.stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("a flush still runs after %.0f s; shutting down beside it", timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                flush, retain, stopping = self._flush_due, self._retention_due, self._stopping
                self._flush_due = self._retention_due = False
            if stopping:
                return  # the final flush is shutdown()'s
            if flush:
                self._flush()  # Agent.flush never raises
            if retain:
                self._retain()


def _fileno(collector: Collector) -> int | None:
    fileno = getattr(collector, "fileno", None)
    if not callable(fileno):
        return None
    try:
        fd = fileno()
    except (OSError, ValueError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _drain_fd(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, OSError):
        pass
