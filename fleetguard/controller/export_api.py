"""Exports from a running controller or `up` (POST /v1/export, GET /v1/export/<id>/<table>/<part>): the
process writes a consistent snapshot of every table (one read transaction, fleetguard/store/export.py)
into a private directory of its own beside the store, each table in parts of about 64 MB, and the
operator's command fetches each part and lays the tables out where the operator asked, as the operator's
user. The process never writes where a client names: a path from a client would let anyone who may read
the API make the fleet's writer (often root) create files anywhere.

Bounded: one snapshot at a time (a second request while one is kept replaces it), removed after
`KEEP_SECONDS` or when the process stops; only parts it wrote are served (a name from the client is looked
up, never used as a path), and an answer is at most `MAX_FILE_BYTES`.
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

from fleetguard.store.export import parts, write_snapshot

KEEP_SECONDS: Final = 600.0
MAX_FILE_BYTES: Final = 256 << 20  # an answer is held in memory whole; parts are ~64 MB
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
    files: dict[str, list[str]]
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
            files = {name: parts(directory / name) for name in tables}
            self._current = _Snapshot(secrets.token_hex(16), directory, tables, files, time.monotonic())
            return {"export_id": self._current.export_id, "tables": tables, "files": files}

    def file(self, export_id: str, table: str, part: str) -> bytes:
        with self._lock:
            current = self._current
            if current is not None and time.monotonic() - current.made > KEEP_SECONDS:
                self._drop()
                current = None
            if current is None or not _ID.fullmatch(export_id) or export_id != current.export_id:
                raise ExportRefused(404, "no such export (it is kept 10 minutes; POST /v1/export again)")
            if part not in current.files.get(table, ()):
                raise ExportRefused(404, f"export {export_id} has no part {part[:64]!r} of {table[:64]!r}")
            path = current.directory / table / part
            size = os.stat(path).st_size
            if size > MAX_FILE_BYTES:
                raise ExportRefused(
                    413,
                    f"part {part} of {table} is {size >> 20} MiB, more than an answer may hold: stop the "
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
