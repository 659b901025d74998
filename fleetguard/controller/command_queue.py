"""Commands queued for hosts (checkpoint, restart, stop, cordon), delivered in ingest replies until acked.

At least once: a command rides on every reply to its host until a batch from that host acknowledges it.
Executed once: the agent records a command id before running it and never runs a recorded id again.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import duckdb

from diagnosis.rules_events import reserved_host_name
from fleetguard.shipping.commands import CommandAck, CommandKind, HostCommand

MAX_PENDING_PER_HOST = 64
MAX_HOSTS_WITH_PENDING = 16_384  # 8x the 2,048 hosts one controller is built for
MAX_RECENTLY_ACKED = 4096  # ids acked lately, so a repeated ack (a redelivered command) is not "unknown"


class CommandRefused(Exception):
    """A command that cannot be queued; one line saying why."""


@dataclass
class CommandBook:
    """Unacknowledged commands per host, in memory; the store's `host_commands` is the durable copy."""

    pending: dict[str, list[HostCommand]]
    recently_acked: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict)

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> CommandBook:
        pending: dict[str, list[HostCommand]] = {}
        for command_id, host, kind, job_id, reason in con.execute(
            "SELECT command_id, host, kind, job_id, reason FROM host_commands WHERE acked_ts IS NULL "
            "ORDER BY created_ts"
        ).fetchall():
            pending.setdefault(str(host), []).append(
                HostCommand(command_id, CommandKind(kind), job_id, reason)
            )
        return cls(pending)

    def for_host(self, host: str) -> list[HostCommand]:
        return list(self.pending.get(host, ()))

    def prepare(self, host: str, kind: CommandKind, job_id: str | None, reason: str) -> HostCommand:
        reserved = reserved_host_name(host)
        if reserved is not None:  # no agent may ship as it: a command for it would wait for ever
            raise CommandRefused(reserved)
        if host not in self.pending and len(self.pending) >= MAX_HOSTS_WITH_PENDING:
            # a host may be named before it first ships (a cordon queued ahead), but invented names must
            # not grow the queue without bound
            raise CommandRefused(f"{MAX_HOSTS_WITH_PENDING} hosts have unacknowledged commands already")
        if len(self.pending.get(host, ())) >= MAX_PENDING_PER_HOST:
            raise CommandRefused(f"host {host} has {MAX_PENDING_PER_HOST} unacknowledged commands already")
        return HostCommand(uuid.uuid4().hex, kind, job_id, reason)

    def queued(self, host: str, command: HostCommand) -> None:
        self.pending.setdefault(host, []).append(command)

    def acked(self, host: str, ids: set[str]) -> AckTally:
        """Mark `host`'s commands `ids` acknowledged; how many were pending, acked before, or unknown (not
        this host's command at all: a stale or forged id, counted so, and acknowledging nothing)."""
        mine = self.pending.get(host, [])
        matched = {c.command_id for c in mine} & ids
        again = {i for i in ids - matched if (host, i) in self.recently_acked}
        left = [c for c in mine if c.command_id not in ids]
        if left:
            self.pending[host] = left
        else:
            self.pending.pop(host, None)
        for command_id in matched:
            self.recently_acked[(host, command_id)] = None
        while len(self.recently_acked) > MAX_RECENTLY_ACKED:
            self.recently_acked.popitem(last=False)
        return AckTally(len(matched), len(again), len(ids) - len(matched) - len(again))


@dataclass(frozen=True)
class AckTally:
    acked: int  # pending until now
    repeated: int  # acked before (the command was delivered again before the first ack was committed)
    unknown: int  # no command of this host's that this controller knows of


def insert_command(con: duckdb.DuckDBPyConnection, host: str, command: HostCommand, now: float) -> None:
    con.execute(
        "INSERT INTO host_commands (command_id, host, kind, job_id, reason, created_ts) "
        "VALUES (?, ?, ?, ?, ?, make_timestamp(CAST(round(? * 1000000) AS BIGINT)))",
        [command.command_id, host, command.kind.value, command.job_id, command.reason, now],
    )


def record_acks(con: duckdb.DuckDBPyConnection, host: str, acks: list[CommandAck], now: float) -> None:
    """Acks from `host` (a host can only acknowledge its own commands); the first ack of a command wins."""
    for ack in acks:
        con.execute(
            "UPDATE host_commands SET acked_ts = make_timestamp(CAST(round(? * 1000000) AS BIGINT)), "
            "outcome = ?, detail = ? WHERE command_id = ? AND host = ? AND acked_ts IS NULL",
            [now, ack.outcome.value, ack.detail, ack.command_id, host],
        )


def record_deliveries(con: duckdb.DuckDBPyConnection, sent: dict[str, int], now: float) -> None:
    """Each command's copies sent (command id -> copies) added to its deliveries."""
    if sent:
        con.execute(
            "UPDATE host_commands SET deliveries = deliveries + s.copies, "
            "last_delivered_ts = make_timestamp(CAST(round(? * 1000000) AS BIGINT)) "
            "FROM (SELECT unnest(?::VARCHAR[]) AS command_id, unnest(?::INTEGER[]) AS copies) s "
            "WHERE host_commands.command_id = s.command_id",
            [now, list(sent), list(sent.values())],
        )
