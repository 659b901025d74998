"""The single writer: checked batches wait in a bounded queue; one thread commits them in groups.

A group is one DuckDB transaction: every table's rows (one INSERT per table), the ledger rows naming the
batches, the hosts' state and the acknowledged commands. So a batch is either stored whole and recorded in
the ledger, or neither; a batch already in the ledger is answered "duplicate" and not stored again. Grouping
is what lets one writer keep up with thousands of agents: the cost of a commit is shared by every batch in it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import numpy as np

from fleetguard.clock import Clock
from fleetguard.controller import ledger as ledger_sql
from fleetguard.controller.columns import concat, insert_sql
from fleetguard.controller.command_queue import CommandBook, insert_command, record_acks, record_deliveries
from fleetguard.controller.hosts import HOST_COLUMNS, HOST_TYPES, TIME_COLUMNS, HostState, load_hosts
from fleetguard.controller.ledger import Ledger
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal
from fleetguard.shipping.commands import CommandKind, HostCommand
from fleetguard.store import Store
from fleetguard.store.schema import TABLES, quote_ident

log = logging.getLogger(__name__)

MAX_GROUP_BATCHES = 512
LEDGER_COMPACT_SECONDS = 60.0

# The store itself failing (disk, memory, I/O): every batch of the group is answered 503 and re-sent later.
_STORE_FAILURES: tuple[type[Exception], ...] = (
    duckdb.OperationalError,
    duckdb.FatalException,
    duckdb.InternalError,
    duckdb.IOException,
    duckdb.PermissionException,
    OSError,
)


@dataclass
class IngestResult:
    duplicate: bool
    commands: list[HostCommand]


@dataclass
class Pending:
    batch: IngestBatch
    received: float  # monotonic
    done: threading.Event = field(default_factory=threading.Event)
    result: IngestResult | None = None
    error: BatchRefused | None = None

    def finish(self, result: IngestResult | None = None, error: BatchRefused | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


Task = Callable[[duckdb.DuckDBPyConnection, float], object]


@dataclass
class _Periodic:
    name: str
    every_seconds: float
    run: Task
    next_at: float = 0.0


class IngestWriter:
    """Owns every write to the store; also runs periodic tasks (analysis, rollups) on its thread."""

    def __init__(self, store: Store, clock: Clock, stats: ControllerStats, *, max_queue: int = 4096) -> None:
        self.store = store
        self.clock = clock
        self.stats = stats
        self._queue: queue.Queue[Pending | Callable[[], None]] = queue.Queue(max_queue)
        con = store.connection
        self.ledger = Ledger.load(con)
        self.hosts: dict[str, HostState] = load_hosts(con)
        self.commands = CommandBook.load(con)
        self._tasks: list[_Periodic] = []
        # Called on the writer thread with each batch once it is committed (rollups note what it touched).
        self.on_committed: list[Callable[[IngestBatch], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.every(LEDGER_COMPACT_SECONDS, "ledger compaction", self._compact_ledger)
        # Host state read by other threads (read API, /metrics) is copied under this lock.
        self.hosts_lock = threading.Lock()

    def every(self, seconds: float, name: str, task: Task) -> None:
        """Run `task(connection, now)` on the writer thread about every `seconds`, inside a transaction.
        Only quick work belongs here (every batch waits for it); the rest goes to controller.maintenance."""
        self._tasks.append(_Periodic(name, seconds, task, self.clock.monotonic() + seconds))

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def host_states(self) -> list[HostState]:
        with self.hosts_lock:
            return [HostState(**vars(h)) for h in self.hosts.values()]

    # ---- from the HTTP workers ------------------------------------------------------------------------

    def submit(self, batch: IngestBatch) -> Pending:
        pending = Pending(batch, time.monotonic())
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later") from None
        return pending

    def call(self, fn: Callable[[], None], timeout: float = 30.0) -> None:
        """Run `fn` on the writer thread (for writes that are not batches: queuing a command)."""
        done = threading.Event()
        errors: list[BaseException] = []

        def wrapped() -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        try:
            self._queue.put(wrapped, timeout=timeout)
        except queue.Full:
            raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later") from None
        if not done.wait(timeout):
            raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later")
        if errors:
            raise errors[0]

    def queue_command(self, host: str, kind: CommandKind, job_id: str | None, reason: str) -> HostCommand:
        """Queue a command for `host` (stored, then carried by its ingest replies); CommandRefused if the
        host has too many unacknowledged ones, BatchRefused(OVERLOADED) if the writer is behind."""
        queued: list[HostCommand] = []

        def enqueue() -> None:
            command = self.commands.prepare(host, kind, job_id, reason)
            with self.store.transaction() as con:
                insert_command(con, host, command, self.clock.time())
            self.commands.queued(host, command)
            self.stats.commands_queued += 1
            queued.append(command)

        self.call(enqueue)
        return queued[0]

    # ---- the writer thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-ingest-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Commit what is queued, then stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group:
                self.commit_group(group)
            elif self._stop.is_set():
                return
            self._run_due_tasks()

    def _take_group(self) -> list[Pending]:
        try:
            first = self._queue.get(timeout=0.2)
        except queue.Empty:
            return []
        items = [first]
        while len(items) < MAX_GROUP_BATCHES:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        group: list[Pending] = []
        for item in items:
            if isinstance(item, Pending):
                group.append(item)
            else:
                if group:  # keep the order: batches before the call are committed before it runs
                    self.commit_group(group)
                    group = []
                item()
        self.stats.queue_depth = self._queue.qsize()
        return group

    def _run_due_tasks(self) -> None:
        now_mono = self.clock.monotonic()
        for task in self._tasks:
            if now_mono < task.next_at:
                continue
            task.next_at = now_mono + task.every_seconds
            try:
                with self.store.transaction() as con:
                    task.run(con, self.clock.time())
            except Exception:
                log.exception("controller task %s failed", task.name)

    def _compact_ledger(self, con: duckdb.DuckDBPyConnection, _now: float) -> None:
        ledger_sql.compact(con)

    # ---- one group -------------------------------------------------------------------------------------

    def commit_group(self, group: list[Pending]) -> None:
        fresh: list[Pending] = []
        duplicates: list[Pending] = []
        seen: set[tuple[str, str, int]] = set()
        for p in group:
            key = p.batch.key
            (duplicates if key in self.ledger or key in seen else fresh).append(p)
            seen.add(key)
        now = self.clock.time()
        t0 = time.monotonic()
        try:
            staged = self._write(fresh, now)
        except _STORE_FAILURES as exc:
            log.error(
                "the store cannot be written (%s: %s); batches are refused with 503", type(exc).__name__, exc
            )
            for p in group:
                self._refuse(
                    p, BatchRefused(Refusal.STORE_FAILED, "the controller's store cannot be written")
                )
            return
        except Exception as exc:
            # A value the checks let through and DuckDB refuses: find the batch, commit the others.
            log.warning("a group of %d batches was refused (%s); committing them one by one", len(fresh), exc)
            self._commit_one_by_one(fresh, duplicates, now)
            return
        self._committed(fresh, duplicates, staged, time.monotonic() - t0)

    def _commit_one_by_one(self, fresh: list[Pending], duplicates: list[Pending], now: float) -> None:
        ok: list[Pending] = []
        staged: list[HostState] = []
        for p in fresh:
            try:
                staged = self._write([p], now)
            except _STORE_FAILURES:
                self._refuse(
                    p, BatchRefused(Refusal.STORE_FAILED, "the controller's store cannot be written")
                )
            except Exception as exc:
                self._refuse(p, BatchRefused(Refusal.INVALID_VALUE, f"the store refused the batch: {exc}"))
            else:
                ok.append(p)
                self._apply_hosts(staged)
        self._committed(ok, duplicates, [], 0.0)

    def _refuse(self, p: Pending, error: BatchRefused) -> None:
        self.stats.refuse(error.reason.value)
        p.finish(error=error)

    def _write(self, fresh: list[Pending], now: float) -> list[HostState]:
        """Commit the batches; return the hosts' new state (applied by the caller once committed)."""
        batches = [p.batch for p in fresh]
        staged = self._stage_hosts(batches, now)
        deliveries = [c.command_id for b in {b.host for b in batches} for c in self.commands.for_host(b)]
        with self.store.transaction() as con:
            views: list[str] = []
            try:
                for name, table in TABLES.items():
                    parts = [b.tables[name] for b in batches if name in b.tables]
                    if parts:
                        view = f"__ingest_{name}"
                        arrays = concat(table, parts)
                        con.register(view, arrays)
                        views.append(view)
                        con.execute(insert_sql(table, view, arrays))
                if batches:
                    con.register("__ingest_ledger_rows", _ledger_rows(batches, now))
                    views.append("__ingest_ledger_rows")
                    con.execute(
                        "INSERT INTO ingest_ledger SELECT host, boot_id, seq, seq, "
                        "make_timestamp(CAST(round(ts * 1000000) AS BIGINT)), n FROM __ingest_ledger_rows"
                    )
                    con.register("__ingest_hosts", _host_rows(staged))
                    views.append("__ingest_hosts")
                    con.execute(_UPSERT_HOSTS)
                for b in batches:
                    if b.acks:
                        record_acks(con, b.host, b.acks, now)
                record_deliveries(con, deliveries, now)
            finally:
                for view in views:
                    with contextlib.suppress(duckdb.Error):
                        con.unregister(view)
        return staged

    def _stage_hosts(self, batches: list[IngestBatch], now: float) -> list[HostState]:
        newest: dict[str, IngestBatch] = {}
        counts: dict[str, tuple[int, int]] = {}
        for b in batches:
            if b.host not in newest or b.sent_ts >= newest[b.host].sent_ts:
                newest[b.host] = b
            n, rows = counts.get(b.host, (0, 0))
            counts[b.host] = (n + 1, rows + b.rows)
        states: list[HostState] = []
        for host, b in newest.items():
            old = self.hosts.get(host)
            n, rows = counts[host]
            states.append(
                HostState(
                    host=host,
                    boot_id=b.boot_id,
                    first_seen=old.first_seen if old else now,
                    last_seen=now,
                    last_sent=max(b.sent_ts, old.last_sent)
                    if old and old.boot_id == b.boot_id
                    else b.sent_ts,
                    last_seq=max(b.seq, old.last_seq) if old and old.boot_id == b.boot_id else b.seq,
                    interval_seconds=b.interval_seconds,
                    batches=(old.batches if old else 0) + n,
                    rows=(old.rows if old else 0) + rows,
                    gpus=_gpus(b) if "gpu_samples" in b.tables else (old.gpus if old else 0),
                    agent_version=b.agent_version,
                )
            )
        return states

    def _apply_hosts(self, staged: list[HostState]) -> None:
        with self.hosts_lock:
            for s in staged:
                self.hosts[s.host] = s

    def _committed(
        self, fresh: list[Pending], duplicates: list[Pending], staged: list[HostState], seconds: float
    ) -> None:
        stats = self.stats
        self._apply_hosts(staged)
        for p in fresh:
            b = p.batch
            self.ledger.add(b.host, b.boot_id, b.seq)
            for hook in self.on_committed:
                hook(b)
            if b.acks:
                self.commands.acked(b.host, {a.command_id for a in b.acks})
                stats.commands_acked += len(b.acks)
            for name, columns in b.tables.items():
                n = len(next(iter(columns.values())))
                stats.rows_committed[name] = stats.rows_committed.get(name, 0) + n
        if fresh:
            stats.batches_committed += len(fresh)
            stats.commit_seconds_sum += seconds
            stats.commits += 1
        stats.duplicates += len(duplicates)
        done = time.monotonic()
        for p, duplicate in [*((p, False) for p in fresh), *((p, True) for p in duplicates)]:
            commands = self.commands.for_host(p.batch.host)
            stats.commands_delivered += len(commands)
            stats.observe_latency(done - p.received)
            p.finish(IngestResult(duplicate=duplicate, commands=commands))


def _ledger_rows(batches: list[IngestBatch], now: float) -> dict[str, object]:
    return {
        "host": np.array([b.host for b in batches], dtype=object),
        "boot_id": np.array([b.boot_id for b in batches], dtype=object),
        "seq": np.array([b.seq for b in batches], dtype=np.int64),
        "ts": np.full(len(batches), now, dtype=np.float64),
        "n": np.array([b.rows for b in batches], dtype=np.int64),
    }


def _gpus(batch: IngestBatch) -> int:
    return len(set(batch.tables["gpu_samples"].get("uuid", ())))


def _host_rows(states: list[HostState]) -> dict[str, object]:
    return {c: np.array([getattr(s, c) for s in states], dtype=object) for c in HOST_COLUMNS}


_UPSERT_HOSTS = (
    "INSERT OR REPLACE INTO fleet_hosts SELECT "
    + ", ".join(
        f"make_timestamp(CAST(round(CAST({quote_ident(c)} AS DOUBLE) * 1000000) AS BIGINT))"
        if c in TIME_COLUMNS
        else f"CAST({quote_ident(c)} AS {t})"
        for c, t in zip(HOST_COLUMNS, HOST_TYPES, strict=True)
    )
    + " FROM __ingest_hosts"
)
