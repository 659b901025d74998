"""Periodic work that must not stall ingest (rollups, retention): a thread of its own, with its own DuckDB
connection. DuckDB runs its transactions beside the writer's: they touch other tables (rollups) or only rows
the writer no longer appends to (old rows, retention), so they never conflict."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import duckdb

from fleetguard.clock import Clock
from fleetguard.controller.ingest import Task
from fleetguard.controller.niceness import lower_this_thread
from fleetguard.store import Store
from fleetguard.store.schema import TABLES

log = logging.getLogger(__name__)


@dataclass
class _Job:
    name: str
    every_seconds: float
    run: Task
    next_at: float


class Maintenance:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._jobs: list[_Job] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def every(self, seconds: float, name: str, task: Task) -> None:
        self._jobs.append(_Job(name, seconds, task, self.clock.monotonic() + seconds))

    def start(self) -> None:
        cursor = (
            self.store.cursor()
        )  # made here: DuckDB connections are made on the thread that owns the store
        self._thread = threading.Thread(
            target=self._run, args=(cursor,), name="fleetguard-maintenance", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def run_due(self, cursor: duckdb.DuckDBPyConnection) -> None:
        for job in self._jobs:
            if self.clock.monotonic() < job.next_at:
                continue
            job.next_at = self.clock.monotonic() + job.every_seconds
            try:
                cursor.execute("BEGIN TRANSACTION")
                try:
                    job.run(cursor, self.clock.time())
                    cursor.execute("COMMIT")
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
            except Exception:
                log.exception("controller maintenance %s failed", job.name)

    def _run(self, cursor: duckdb.DuckDBPyConnection) -> None:
        lower_this_thread()  # beside ingest, never ahead of it (controller/niceness.py)
        try:
            while not self._stop.wait(1.0):
                self.run_due(cursor)
        finally:
            cursor.close()


def retention(days: float) -> Task:
    """Delete record rows older than `days` (the store's retention_days); the rollups keep their own."""

    def run(cursor: duckdb.DuckDBPyConnection, now: float) -> None:
        cutoff = f"make_timestamp(CAST(round({now - days * 86400.0} * 1000000) AS BIGINT))"
        for table in TABLES:
            cursor.execute(f"DELETE FROM {table} WHERE ts < {cutoff}")
        # commands are kept while unacknowledged (they are still being delivered), then as long as records
        cursor.execute(f"DELETE FROM host_commands WHERE acked_ts IS NOT NULL AND acked_ts < {cutoff}")

    return run
