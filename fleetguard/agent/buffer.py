"""The agent's write buffer: rows wait here until the next flush; a failed write keeps them for the next try.

A row that the store refuses on its own (a poison record) is set aside in a JSON-lines file next to the store,
counted, and never silently dropped, so one bad record cannot block every later one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from fleetguard.store import Store
from fleetguard.store.schema import TABLE_BY_RECORD

log = logging.getLogger(__name__)


class WriteBuffer:
    def __init__(self, store: Store, rejected_path: Path | None = None) -> None:
        self._store = store
        self._rows: list[object] = []
        self._lock = threading.Lock()
        self._rejected_path = rejected_path
        self.rows_written: dict[str, int] = {}
        self.write_errors = 0
        self.rejected_rows = 0

    def add(self, rows: Iterable[object]) -> None:
        with self._lock:
            self._rows.extend(rows)

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def flush(self) -> int:
        """Write everything buffered; return rows written. On failure the rows stay buffered."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return 0
        try:
            self._store.append(rows)
        except Exception as exc:
            self.write_errors += 1
            log.warning("store write of %d rows failed (%s); retrying row by row", len(rows), exc)
            return self._write_one_by_one(rows)
        self._count(rows)
        return len(rows)

    def _write_one_by_one(self, rows: list[object]) -> int:
        written: list[object] = []
        for index, row in enumerate(rows):
            try:
                self._store.append([row])
            except Exception as exc:
                if _store_is_broken(exc):
                    # The store itself fails (disk full, closed): keep everything not yet written.
                    with self._lock:
                        self._rows[:0] = rows[index:]
                    self._count(written)
                    return len(written)
                self._reject(row, exc)
            else:
                written.append(row)
        self._count(written)
        return len(written)

    def _reject(self, row: object, exc: Exception) -> None:
        self.rejected_rows += 1
        log.error(
            "store refused a %s record (%s); set aside in %s", type(row).__name__, exc, self._rejected_path
        )
        if self._rejected_path is None:
            return
        record: dict[str, object] = {"type": type(row).__name__, "error": str(exc)}
        if dataclasses.is_dataclass(row) and not isinstance(row, type):
            record["record"] = dataclasses.asdict(row)
        with self._rejected_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")

    def _count(self, rows: Iterable[object]) -> None:
        for row in rows:
            name = TABLE_BY_RECORD[type(row)].name
            self.rows_written[name] = self.rows_written.get(name, 0) + 1


def _store_is_broken(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(
        s in text for s in ("closed", "no space", "read-only", "i/o error", "database has been invalidated")
    )
