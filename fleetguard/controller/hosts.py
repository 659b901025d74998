"""What the controller knows of each host: its agent incarnation, when it was last heard, how much it sent."""

from __future__ import annotations

from dataclasses import dataclass, replace

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


# Per host, its newest ledger row: the batch committed last (the ledger is written with every batch).
_NEWEST_COMMITS = """
SELECT host, boot_id, seq_hi, epoch(committed_ts) FROM ingest_ledger
QUALIFY row_number() OVER (PARTITION BY host ORDER BY committed_ts DESC, seq_hi DESC) = 1
"""


def load_hosts(con: duckdb.DuckDBPyConnection) -> dict[str, HostState]:
    """The hosts as stored, each brought up to its newest ledger row: fleet_hosts is written about once a
    second, the ledger in every commit, so after a crash the ledger knows the later last sign of life."""
    cols = ", ".join(f"epoch({c})" if c in TIME_COLUMNS else f'"{c}"' for c in HOST_COLUMNS)
    rows = con.execute(f"SELECT {cols} FROM fleet_hosts").fetchall()
    hosts = {str(r[0]): HostState(*r) for r in rows}
    for host, boot_id, seq, committed in con.execute(_NEWEST_COMMITS).fetchall():
        state = hosts.get(str(host))
        if state is not None:
            hosts[state.host] = caught_up(state, str(boot_id), int(seq), float(committed))
    return hosts


def caught_up(state: HostState, boot_id: str, seq: int, committed: float) -> HostState:
    """`state` after the batch the ledger says was committed last (`seq` of `boot_id` at `committed`), if
    that is newer than what `state` knows."""
    if committed <= state.last_seen:
        return state
    last_seq = max(seq, state.last_seq) if boot_id == state.boot_id else seq
    return replace(state, boot_id=boot_id, last_seen=committed, last_seq=last_seq)


def to_json(state: HostState, now: float, silent_after: float) -> dict[str, object]:
    doc: dict[str, object] = dict(vars(state))
    doc["silent"] = state.is_silent(now, silent_after)
    doc["last_seen_seconds_ago"] = max(0.0, now - state.last_seen)
    return doc
