"""The sink of an agent with its own store: rows go to a DuckDB file through the WriteBuffer (its failure
handling, poison-row isolation and rejected-rows file), retention runs here, and extensions read the store."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.cold_pages import reclaim_file_pages
from fleetguard.agent.limits import AGENT_DUCKDB, bound_native_threads, raise_open_file_limit
from fleetguard.startup import StartupError, one_line, os_reason
from fleetguard.store import Store, StoreError
from fleetguard.store.holder import HolderKind, announce, withdraw

log = logging.getLogger(__name__)


class LocalStoreSink:
    def __init__(self, store: Store, rejected_path: Path | None) -> None:
        self._store = store
        self._buffer = WriteBuffer(store, rejected_path)

    @classmethod
    def open(cls, path: str) -> LocalStoreSink:
        """The sink writing `path` (StartupError naming store.path if it cannot be used)."""
        # DuckDB's start-up (import, connect, migrations) runs code its writes never run again: reclaimed
        # after each step, the agent's peak RSS is its working set, not their sum (BENCHMARKS.md, issue 22).
        release_start_up_pages()
        store = open_store(path, on_connect=release_start_up_pages)
        release_start_up_pages()
        return cls(store, Path(path + ".rejected.jsonl") if path != ":memory:" else None)

    @property
    def buffer(self) -> WriteBuffer:
        return self._buffer

    @property
    def store(self) -> Store:
        return self._store

    @property
    def metrics(self) -> None:
        return None

    def start(self) -> None:
        # Named when another command finds the store locked (an agent serves no read API to ask instead).
        try:
            announce(self._store.path, HolderKind.AGENT)
        except OSError as exc:  # a convenience for error messages: never stop the agent over it
            log.warning("cannot note this agent beside its store: %s", exc)

    def apply_retention(self, days: float, now: float) -> None:
        self._store.apply_retention(days, now=now)

    def close(self) -> None:
        withdraw(self._store.path)
        self._store.close()

    def summary(self) -> dict[str, object]:
        return {}


def open_store(path: str, on_connect: Callable[[], object] | None = None) -> Store:
    """The store for writing, or a StartupError naming store.path and why it cannot be used (`on_connect`:
    as `Store.open`'s)."""
    bound_native_threads()  # before any numpy import (an extension's) starts a BLAS pool per core
    raise_open_file_limit()  # connections local users hold must not take the descriptors the agent needs
    try:
        return Store.open(path, limits=AGENT_DUCKDB, on_connect=on_connect)
    except StoreError as exc:
        raise StartupError(f"store.path: {one_line(str(exc))}") from exc
    except FileExistsError as exc:  # making its directory: a file is in the way
        raise StartupError(f"store.path {path}: {exc.filename} exists and is not a directory") from exc
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != path else ""
        raise StartupError(f"store.path {path}: {os_reason(exc)}{where}") from exc


def duckdb_library() -> str | None:
    """The file of DuckDB's loaded extension module (`_duckdb` in DuckDB 1.4+, `duckdb.duckdb` before)."""
    for name in ("_duckdb", "duckdb.duckdb"):
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str) and file.endswith(".so"):
            return os.path.realpath(file)
    return None


def release_start_up_pages() -> int:
    """Reclaim DuckDB's library pages touched so far (what the agent runs again comes back on its own);
    bytes advised."""
    library = duckdb_library()
    return reclaim_file_pages(library) if library else 0
