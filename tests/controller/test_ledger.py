"""The ingest ledger: committed sequence ranges per agent incarnation, in memory and in the store."""

from __future__ import annotations

from fleetguard.controller.ledger import Ledger, compact
from fleetguard.store import Store


def test_ranges_merge_as_batches_arrive_in_any_order() -> None:
    ledger = Ledger()
    for seq in (1, 2, 5, 4, 3, 9):
        ledger.add("h", "b", seq)
    assert ledger.ranges("h", "b") == [(1, 5), (9, 9)]
    assert ("h", "b", 3) in ledger
    assert ("h", "b", 6) not in ledger
    assert ("h", "other-boot", 3) not in ledger


def test_compaction_merges_store_rows_into_ranges_and_load_reads_them_back(store: Store) -> None:
    with store.transaction() as con:
        for seq in (1, 2, 3, 7, 8):
            con.execute(
                "INSERT INTO ingest_ledger VALUES ('h', 'b', ?, ?, make_timestamp(0), 10)", [seq, seq]
            )
        con.execute("INSERT INTO ingest_ledger VALUES ('h', 'c', 1, 1, make_timestamp(0), 10)")
        assert compact(con) == 3
    rows = store.connection.execute(
        'SELECT host, boot_id, seq_lo, seq_hi, "rows" FROM ingest_ledger ORDER BY boot_id, seq_lo'
    ).fetchall()
    assert rows == [("h", "b", 1, 3, 30), ("h", "b", 7, 8, 20), ("h", "c", 1, 1, 10)]
    loaded = Ledger.load(store.connection)
    assert loaded.ranges("h", "b") == [(1, 3), (7, 8)]
