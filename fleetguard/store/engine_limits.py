"""DuckDB's worker threads and memory limit for one process, as plain settings: importing this module does not
load DuckDB (the agent's limits name them whether or not it keeps a store)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """DuckDB's worker threads and memory limit (MiB) for one process."""

    threads: int
    memory_limit_mib: int

    def __post_init__(self) -> None:
        if not 1 <= self.threads <= 1024:
            raise ValueError(f"threads must be 1..1024, not {self.threads}")
        if not 16 <= self.memory_limit_mib <= 1 << 20:
            raise ValueError(f"memory_limit_mib must be 16..1048576, not {self.memory_limit_mib}")

    def config(self) -> dict[str, str | bool | int | float | list[str]]:
        """Settings for duckdb.connect: the worker pool is sized before it starts."""
        return {"threads": self.threads, "memory_limit": f"{self.memory_limit_mib}MiB"}

    def apply_after_connect(self, con: duckdb.DuckDBPyConnection) -> None:
        """DuckDB 1.4+ also starts an async I/O pool (8 threads); an older DuckDB has none to shrink."""
        import duckdb  # loaded already: `con` is one of its connections

        with contextlib.suppress(duckdb.Error):
            con.execute("SET async_threads = 1")
