"""Commands queued for hosts are bounded in memory and do not stay in the store for ever."""

from __future__ import annotations

import duckdb
import pytest

from fleetguard.controller import command_queue
from fleetguard.controller.command_queue import CommandBook, CommandRefused, insert_command, record_acks
from fleetguard.controller.maintenance import retention
from fleetguard.shipping.commands import CommandAck, CommandKind, CommandOutcome
from fleetguard.store.controller_tables import controller_ddl

DAY = 86400.0


def test_invented_host_names_cannot_grow_the_queue_without_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command_queue, "MAX_HOSTS_WITH_PENDING", 3)
    book = CommandBook({})
    for i in range(3):
        book.queued(f"h{i}", book.prepare(f"h{i}", CommandKind.CORDON, None, "test"))
    with pytest.raises(CommandRefused, match="3 hosts have unacknowledged commands"):
        book.prepare("h3", CommandKind.CORDON, None, "test")
    book.queued("h0", book.prepare("h0", CommandKind.RESTART, "job", "a host already waiting takes more"))
    book.acked("h1", {c.command_id for c in book.for_host("h1")})
    book.prepare("h3", CommandKind.CORDON, None, "room again once a host has acknowledged all of its own")


def test_acknowledged_commands_leave_the_store_with_the_records_and_pending_ones_stay() -> None:
    con = duckdb.connect()
    for statement in controller_ddl():
        con.execute(statement)
    from fleetguard.store.schema import TABLES

    for table in TABLES.values():
        con.execute(table.create_sql())
    book = CommandBook({})
    old_acked, old_pending, new_acked = (book.prepare("h", CommandKind.CORDON, None, "x") for _ in range(3))
    insert_command(con, "h", old_acked, now=1.0 * DAY)
    insert_command(con, "h", old_pending, now=1.0 * DAY)
    insert_command(con, "h", new_acked, now=30.0 * DAY)
    done = CommandOutcome.DONE
    record_acks(con, "h", [CommandAck(old_acked.command_id, done, "")], now=1.5 * DAY)
    record_acks(con, "h", [CommandAck(new_acked.command_id, done, "")], now=30.5 * DAY)
    retention(days=7.0)(con, 31.0 * DAY)
    left = {r[0] for r in con.execute("SELECT command_id FROM host_commands").fetchall()}
    assert left == {old_pending.command_id, new_acked.command_id}
