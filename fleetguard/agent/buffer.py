"""The agent's write buffer: rows wait here until the next flush; a failed write keeps them for the next try.

What a failed write means is read from the exception's type, never from its text:
- the store itself failing (I/O error, disk full, out of memory, connection gone) keeps the rows buffered
  for a later flush;
- `UnstorableRows` names the rows holding a value their column cannot hold: those are set aside and the rest
  is written at once;
- any other error is about the batch's content: the batch is split in halves until the rows the store refuses
  on their own (poison records) are found, within `isolate_budget_seconds` per flush (what is left waits for
  the next flush). A poison record is set aside in a JSON-lines file next to the store (or, when that file
  cannot be written, logged whole), counted, and never silently dropped, so one bad record cannot block
  every later one.

Flushes run on the agent's writer thread, never on its sampling loop.

While the store fails the buffer holds at most `max_rows` rows; past that the oldest are dropped, counted and
logged. `after_stored(callback)` queues a callback behind the rows buffered so far; it runs once all of them
are stored (or set aside, or dropped): that is how a collector learns how far its records are safe.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import duckdb

from fleetguard.private_files import append_line
from fleetguard.store import Store, UnstorableRows
from fleetguard.store.schema import TABLE_BY_RECORD

log = logging.getLogger(__name__)

# Rows take 250-500 bytes each: at most ~200 MB, about 25 minutes of a busy host (8 GPUs, 8 NIC ports with
# their counters: ~350 rows/s).
DEFAULT_MAX_ROWS: Final = 500_000
# How long one flush may spend looking for the rows a refused batch holds that the store refuses alone.
DEFAULT_ISOLATE_BUDGET_SECONDS: Final = 2.0

# The store itself failing, whatever the rows: keep them and try again on a later flush. OperationalError is
# DuckDB's (DB-API) class for I/O errors (EIO, ENOSPC, EDQUOT, EFBIG, read-only file system), out of memory,
# a closed or busy connection and transaction conflicts; data errors (conversion, constraint) are not in it.
STORE_FAILURES: Final[tuple[type[Exception], ...]] = (
    duckdb.OperationalError,
    duckdb.FatalException,  # the database was invalidated by an earlier failure
    duckdb.InternalError,
    duckdb.InterruptException,
    duckdb.PermissionException,
    OSError,
)


class _AfterStored:
    """A callback queued between rows."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback


class WriteBuffer:
    def __init__(
        self,
        store: Store,
        rejected_path: Path | None = None,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        isolate_budget_seconds: float = DEFAULT_ISOLATE_BUDGET_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self._store = store
        self.isolate_budget_seconds = isolate_budget_seconds
        self._monotonic = monotonic
        self._rejected_path = rejected_path
        self.max_rows = max_rows
        self._queue: deque[object] = deque()  # rows oldest first, with _AfterStored marks between them
        self._rows = 0  # rows in the queue, marks not counted
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time, so rows are stored in the order added
        self._store_failing = False
        self._dropped_since_full = 0
        self.rows_written: dict[str, int] = {}
        self.write_errors = 0
        self.rejected_rows = 0
        self.dropped_rows = 0

    def add(self, rows: Iterable[object]) -> None:
        new = list(rows)
        with self._lock:
            self._queue.extend(new)
            self._rows += len(new)
            self._drop_over_limit()

    def after_stored(self, callback: Callable[[], None]) -> None:
        """Run `callback` (on the flushing thread) once every row added so far is stored or dropped."""
        with self._lock:
            self._queue.append(_AfterStored(callback))

    def __len__(self) -> int:
        with self._lock:
            return self._rows

    def flush(self) -> int:
        """Write everything buffered; return rows written. Never raises: what cannot be written now stays
        buffered, in order, for the next flush."""
        with self._flush_lock:
            with self._lock:
                items = list(self._queue)
                self._queue.clear()
                self._rows = 0
            rows = [item for item in items if not isinstance(item, _AfterStored)]
            done, written = self._write(rows)
            # Everything queued before the first row not done is finished; the rest goes back in front.
            split = _index_of_row(items, done)
            with self._lock:
                if split < len(items):
                    self._queue.extendleft(reversed(items[split:]))
                    self._rows += len(rows) - done
                    self._drop_over_limit()
                elif self._dropped_since_full:
                    log.warning(
                        "store caught up; %d rows were dropped while it failed", self._dropped_since_full
                    )
                    self._dropped_since_full = 0
            for item in items[:split]:
                if isinstance(item, _AfterStored):
                    _run(item.callback)
            return written

    def _write(self, rows: list[object]) -> tuple[int, int]:
        """Store `rows` in order; return (rows done from the front: stored or set aside, rows stored)."""
        if not rows:
            return 0, 0
        try:
            self._store.append(rows)
        except UnstorableRows as exc:
            self.write_errors += 1
            return self._write_without(rows, exc)
        except STORE_FAILURES as exc:
            self.write_errors += 1
            self._store_failed(exc, len(rows))
            return 0, 0
        except Exception as exc:
            self.write_errors += 1
            log.warning(
                "store refused a batch of %d rows (%s: %s); looking for the rows it refuses alone",
                len(rows),
                _name(exc),
                exc,
            )
            done, written = self._isolate(rows, self._monotonic() + self.isolate_budget_seconds)
            if done < len(rows) and not self._store_failing:
                log.warning(
                    "%d rows wait for the next flush: this one spent its time on refused rows",
                    len(rows) - done,
                )
            return done, written
        self._store_recovered()
        self._count(rows)
        return len(rows), len(rows)

    def _write_without(self, rows: list[object], exc: UnstorableRows) -> tuple[int, int]:
        """Set aside the rows the store named, write the rest. Each call removes one table's bad rows, so
        this recurses at most once per table."""
        bad = {id(row): reason for row, reason in exc.rows}
        keep = [row for row in rows if id(row) not in bad]
        done, written = self._write(keep)
        # Rows after the first one not written stay buffered, bad ones too: they are set aside when reached.
        cut = len(rows) if done == len(keep) else next(i for i, r in enumerate(rows) if r is keep[done])
        for row in rows[:cut]:
            if id(row) in bad:
                self._reject(row, f"UnstorableRows: {bad[id(row)]}")
        return cut, written

    def _isolate(self, rows: list[object], deadline: float) -> tuple[int, int]:
        """Store a refused batch in halves, down to single rows the store refuses (set aside), in order;
        (rows done from the front, rows stored). Past `deadline` the rest stays buffered for the next
        flush; every call still does at least one part, so each flush makes progress."""
        if len(rows) == 1:
            return self._write_single(rows[0])
        done = written = 0
        middle = len(rows) // 2
        for part in (rows[:middle], rows[middle:]):
            part_done, part_written = self._write_part(part, deadline)
            done, written = done + part_done, written + part_written
            if part_done < len(part) or self._monotonic() > deadline:
                break
        return done, written

    def _write_part(self, part: list[object], deadline: float) -> tuple[int, int]:
        try:
            self._store.append(part)
        except STORE_FAILURES as exc:
            self._store_failed(exc, len(part))
            return 0, 0
        except Exception:
            return self._isolate(part, deadline)
        self._store_recovered()
        self._count(part)
        return len(part), len(part)

    def _write_single(self, row: object) -> tuple[int, int]:
        try:
            self._store.append([row])
        except STORE_FAILURES as exc:
            self._store_failed(exc, 1)
            return 0, 0
        except Exception as exc:
            self._reject(row, f"{_name(exc)}: {exc}")
            return 1, 0
        self._count([row])
        return 1, 1

    def _store_failed(self, exc: Exception, kept: int) -> None:
        if not self._store_failing:  # once per outage, not every flush
            self._store_failing = True
            log.error(
                "the store cannot be written (%s: %s); %d rows stay buffered and are retried every flush",
                _name(exc),
                exc,
                kept,
            )

    def _store_recovered(self) -> None:
        if self._store_failing:
            self._store_failing = False
            log.warning("the store can be written again")

    def _reject(self, row: object, error: str) -> None:
        """Set a row the store refuses aside: in the rejected file, else whole in the log. Never kept
        buffered: it would be tried first on every flush and block every row behind it for good."""
        if self._rejected_path is not None:
            try:
                # never through a link planted there, nor into a FIFO that would block the flush
                append_line(self._rejected_path, _rejected_line(row, error))
            except OSError as write_exc:
                self.rejected_rows += 1
                log.error(
                    "store refused a record and it cannot be set aside in %s (%s); the record: %s",
                    self._rejected_path,
                    write_exc,
                    _rejected_line(row, error),
                )
                return
        self.rejected_rows += 1
        log.error(
            "store refused a %s record (%s); %s",
            type(row).__name__,
            error,
            f"set aside in {self._rejected_path}" if self._rejected_path is not None else "dropped",
        )

    def _drop_over_limit(self) -> None:
        """Drop the oldest rows past `max_rows` (marks stay, in order). Call with `_lock` held."""
        excess = self._rows - self.max_rows
        if excess <= 0:
            return
        if not self._dropped_since_full:
            log.error(
                "write buffer full (%d rows) while the store fails: dropping the oldest rows", self.max_rows
            )
        marks: list[object] = []
        dropped = 0
        while dropped < excess:
            item = self._queue.popleft()
            if isinstance(item, _AfterStored):
                marks.append(item)
            else:
                dropped += 1
        self._queue.extendleft(reversed(marks))
        self._rows -= dropped
        self.dropped_rows += dropped
        self._dropped_since_full += dropped

    def _count(self, rows: Iterable[object]) -> None:
        for row in rows:
            name = TABLE_BY_RECORD[type(row)].name
            self.rows_written[name] = self.rows_written.get(name, 0) + 1


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _rejected_line(row: object, error: str) -> str:
    record: dict[str, object] = {"type": type(row).__name__, "error": error}
    try:
        if dataclasses.is_dataclass(row) and not isinstance(row, type):
            record["record"] = dataclasses.asdict(row)
        return json.dumps(record, default=str)
    except Exception:  # a row odd enough to be refused may not serialise either: keep what can be kept
        record["record"] = repr(row)
        return json.dumps(record, default=str)


def _index_of_row(items: list[object], n: int) -> int:
    """Where in `items` the row with index `n` (counting rows only, not marks) is; len(items) if none."""
    seen = 0
    for index, item in enumerate(items):
        if not isinstance(item, _AfterStored):
            if seen == n:
                return index
            seen += 1
    return len(items)


def _run(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("a callback waiting for stored rows failed")
