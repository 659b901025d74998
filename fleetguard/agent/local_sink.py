"""The sink of an agent with its own store: rows go to a DuckDB file through the WriteBuffer (its failure
handling, poison-row isolation and rejected-rows file), retention runs here, and extensions read the store."""

from __future__ import annotations

import logging
from pathlib import Path

from fleetguard.agent.buffer import WriteBuffer
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
        store = open_store(path)
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


def open_store(path: str) -> Store:
    """The store for writing, or a StartupError naming store.path and why it cannot be used."""
    bound_native_threads()  # before any numpy import (an extension's) starts a BLAS pool per core
    raise_open_file_limit()  # connections local users hold must not take the descriptors the agent needs
    try:
        return Store.open(path, limits=AGENT_DUCKDB)
    except StoreError as exc:
        raise StartupError(f"store.path: {one_line(str(exc))}") from exc
    except FileExistsError as exc:  # making its directory: a file is in the way
        raise StartupError(f"store.path {path}: {exc.filename} exists and is not a directory") from exc
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != path else ""
        raise StartupError(f"store.path {path}: {os_reason(exc)}{where}") from exc
