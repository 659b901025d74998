"""Exports from a running controller or `up` (POST /v1/export, GET /v1/export/<id>/<table>): the process
writes a consistent snapshot of every table (one read transaction, fleetguard/store/export.py) into a
private directory of its own beside the store, and the operator's command fetches each table's Parquet file
and lays it out where the operator asked, as the operator's user. The process never writes where a client
names: a path from a client would let anyone who may read the API make the fleet's writer (often root)
create files anywhere.

Bounded: one snapshot at a time (a second request while one is kept replaces it), removed after
`KEEP_SECONDS` or when the process stops, and a table file larger than `MAX_FILE_BYTES` is refused with
what to do instead.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import duckdb

from fleetguard.store.export import write_snapshot

KEEP_SECONDS: Final = 600.0
MAX_FILE_BYTES: Final = 1 << 30  # a response is held in memory whole
_ID = re.compile(r"[0-9a-f]{32}")


class ExportRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Snapshot:
    export_id: str
    directory: Path
    tables: dict[str, int]
    made: float


class ExportSnapshots:
    def __init__(self, store_path: str) -> None:
        self._parent = Path(store_path).resolve().parent if store_path != ":memory:" else None
        self._lock = threading.Lock()
        self._current: _Snapshot | None = None

    def make(self, cursor: duckdb.DuckDBPyConnection, *, operator: bool) -> dict[str, Any]:
        """A new snapshot of every table (replacing the one kept); its id and rows per table."""
        if self._parent is None:
            raise ExportRefused(409, "this process keeps its store in memory: nothing to export")
        with self._lock:
            self._drop()
            directory = Path(tempfile.mkdtemp(prefix=".fleetguard-export-", dir=self._parent))  # mode 0700
            try:
                tables = write_snapshot(cursor, directory, operator=operator)
            except BaseException:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            self._current = _Snapshot(secrets.token_hex(16), directory, tables, time.monotonic())
            return {"export_id": self._current.export_id, "tables": tables}

    def file(self, export_id: str, table: str) -> bytes:
        with self._lock:
            current = self._current
            if current is not None and time.monotonic() - current.made > KEEP_SECONDS:
                self._drop()
                current = None
            if current is None or not _ID.fullmatch(export_id) or export_id != current.export_id:
                raise ExportRefused(404, "no such export (it is kept 10 minutes; POST /v1/export again)")
            if table not in current.tables:
                raise ExportRefused(404, f"export {export_id} has no table {table[:64]!r}")
            path = current.directory / f"{table}.parquet"
            size = os.stat(path).st_size
            if size > MAX_FILE_BYTES:
                raise ExportRefused(
                    413,
                    f"table {table} is {size >> 20} MiB as Parquet, more than an answer may hold: stop the "
                    "process and run `fleetguard export` on its store",
                )
            return path.read_bytes()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._current is not None:
            shutil.rmtree(self._current.directory, ignore_errors=True)
            self._current = None
