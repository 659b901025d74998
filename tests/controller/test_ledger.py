"""The ingest ledger: committed sequence ranges per agent incarnation, in memory and in the store."""

from __future__ import annotations

from fleetguard.controller.ledger import MAX_BOOTS_PER_HOST, MAX_RANGES_PER_BOOT, Ledger, compact
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


def test_a_host_inventing_a_boot_id_per_batch_or_skipping_seqs_keeps_its_ledger_bounded() -> None:
    ledger = Ledger()
    ledger.add("good", "b", 1)
    for i in range(5 * MAX_BOOTS_PER_HOST):
        ledger.add("evil", f"boot-{i}", 1)
    for seq in range(1, 6 * MAX_RANGES_PER_BOOT, 2):  # every other seq: one range each
        ledger.add("evil", "gaps", seq)
    assert len(ledger) <= MAX_BOOTS_PER_HOST + MAX_RANGES_PER_BOOT
    assert ("good", "b", 1) in ledger  # another host's ledger is untouched
    assert ("evil", f"boot-{5 * MAX_BOOTS_PER_HOST - 1}", 1) in ledger  # the newest incarnations are kept
    assert ("evil", "gaps", 6 * MAX_RANGES_PER_BOOT - 1) in ledger  # and the highest ranges


def test_compaction_keeps_the_stored_ledger_within_the_same_bounds(store: Store) -> None:
    with store.transaction() as con:
        con.execute(
            "INSERT INTO ingest_ledger SELECT 'evil', 'boot-' || i, 1, 1, make_timestamp(i * 1000000), 1 "
            f"FROM range({3 * MAX_BOOTS_PER_HOST}) t(i)"
        )
        con.execute(
            "INSERT INTO ingest_ledger SELECT 'evil', 'gaps', 2 * i, 2 * i, make_timestamp(10000000000), 1 "
            f"FROM range({2 * MAX_RANGES_PER_BOOT}) t(i)"
        )
        con.execute("INSERT INTO ingest_ledger VALUES ('good', 'b', 1, 5, make_timestamp(0), 5)")
        assert compact(con) == MAX_BOOTS_PER_HOST + MAX_RANGES_PER_BOOT
    loaded = Ledger.load(store.connection)
    assert ("good", "b", 3) in loaded
    assert ("evil", f"boot-{3 * MAX_BOOTS_PER_HOST - 1}", 1) in loaded
    assert ("evil", "boot-0", 1) not in loaded
    assert ("evil", "gaps", 2 * (2 * MAX_RANGES_PER_BOOT - 1)) in loaded
