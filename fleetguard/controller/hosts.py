"""What the controller knows of each host: its agent incarnation, when it was last heard, how much it sent."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from diagnosis.health import SILENT_INTERVALS as SILENT_INTERVALS  # the one health model's rule
from diagnosis.health import SILENT_MARGIN_SECONDS as SILENT_MARGIN_SECONDS
from diagnosis.health import Liveness, silent_after


@dataclass
class HostState:
    host: str
    boot_id: str
    first_seen: float
    last_seen: float  # controller clock, at the last commit
    last_sent: float  # the agent's clock, when it sent its newest batch
    last_seq: int
    interval_seconds: float
    batches: int
    rows: int
    gpus: int  # distinct GPUs in its newest batch with GPU samples
    agent_version: str

    def silent_after(self, configured_seconds: float) -> float:
        return silent_after(self.interval_seconds, configured_seconds)

    def liveness(self, now: float, configured_seconds: float = 0.0) -> Liveness:
        return Liveness(max(0.0, now - self.last_seen), self.silent_after(configured_seconds))

    def is_silent(self, now: float, configured_seconds: float = 0.0) -> bool:
        return now - self.last_seen > self.silent_after(configured_seconds)


HOST_COLUMNS = (
    "host",
    "boot_id",
    "first_seen",
    "last_seen",
    "last_sent",
    "last_seq",
    "interval_seconds",
    "batches",
    "rows",
    "gpus",
    "agent_version",
)
HOST_TYPES = ("VARCHAR", "VARCHAR", "", "", "", "BIGINT", "DOUBLE", "BIGINT", "BIGINT", "BIGINT", "VARCHAR")
TIME_COLUMNS = frozenset({"first_seen", "last_seen", "last_sent"})


def load_hosts(con: duckdb.DuckDBPyConnection) -> dict[str, HostState]:
    cols = ", ".join(f"epoch({c})" if c in TIME_COLUMNS else f'"{c}"' for c in HOST_COLUMNS)
    rows = con.execute(f"SELECT {cols} FROM fleet_hosts").fetchall()
    return {str(r[0]): HostState(*r) for r in rows}


def to_json(state: HostState, now: float, silent_after: float) -> dict[str, object]:
    doc: dict[str, object] = dict(vars(state))
    doc["silent"] = state.is_silent(now, silent_after)
    doc["last_seen_seconds_ago"] = max(0.0, now - state.last_seen)
    return doc
