"""The order rows were stored in, for readers that take only what is new (schema 16).

A row's own `ts` says when it was measured, not when it arrived: an agent catching up sends its backlog after
its newest rows, and an event is stored after its repeats are folded. A reader that keeps a watermark on `ts`
skips such rows. So each table a reader follows has an `ingest_seq` column drawn from a sequence of its own:
the controller's writer and the store draw one value per INSERT statement (every row of a statement shares
it; drawing one per row costs ~0.35 us of DuckDB time a row), and any other INSERT gets one per row from the
column's default, so no writer can leave a row unnumbered. Rows stored before schema 16 have none and are
never handed on as new.

Values are unique per statement and rise in the order statements began, not the order they committed (the
controller commits from two writer lanes): a reader must allow for a value that shows up after higher ones
(`fleetguard.incidents.watermark`). Where a diagnosis round got to is kept beside it
(`fleetguard.store.diagnosis_state_tables`).
"""

from __future__ import annotations

import duckdb

SEQ_COLUMN = "ingest_seq"
# The tables the diagnosis round reads as they grow.
ORDERED_TABLES = ("gpu_samples", "nic_samples", "nic_counters", "events", "findings")


def sequence_name(table: str) -> str:
    return f"{table}_ingest_seq"


def statement_seq_sql(table: str) -> str:
    """An expression drawing one value for a whole INSERT ... SELECT (an uncorrelated subquery: once)."""
    return f"(SELECT nextval('{sequence_name(table)}'))"


def create_ingest_order(con: duckdb.DuckDBPyConnection) -> None:
    """Number the followed tables' rows from now on; existing rows stay unnumbered (NULL, not re-read)."""
    for table in ORDERED_TABLES:
        con.execute(f"CREATE SEQUENCE IF NOT EXISTS {sequence_name(table)}")
        con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {SEQ_COLUMN} BIGINT")
        con.execute(
            f"ALTER TABLE {table} ALTER COLUMN {SEQ_COLUMN} SET DEFAULT nextval('{sequence_name(table)}')"
        )
