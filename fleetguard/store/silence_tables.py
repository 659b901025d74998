"""Alert silences, the outbox's send order and incidents' flap counts (store migration 13).

A silence mutes matching alerts at the relay until it expires or is ended; who set it and why are kept (the
audit trail). The outbox gets a sequence number so rows written in the same instant still leave in the order
they were written, and the step of its retry schedule it has reached (probes of a failing endpoint
do not advance it); incidents get the number of times a damped fault flapped.
"""

from __future__ import annotations

import duckdb

SILENCE_DDL = (
    """CREATE TABLE IF NOT EXISTS alert_silences (
  silence_id VARCHAR PRIMARY KEY,
  matchers_json VARCHAR NOT NULL,
  created_by VARCHAR NOT NULL,
  reason VARCHAR NOT NULL,
  created_at TIMESTAMP NOT NULL,
  expires_at TIMESTAMP NOT NULL,
  ended_at TIMESTAMP
)""",
    "CREATE SEQUENCE IF NOT EXISTS alert_outbox_seq",
    "ALTER TABLE alert_outbox ADD COLUMN IF NOT EXISTS seq BIGINT DEFAULT 0",
    "ALTER TABLE alert_outbox ADD COLUMN IF NOT EXISTS schedule_step INTEGER DEFAULT 0",
    "ALTER TABLE incidents ADD COLUMN IF NOT EXISTS flaps INTEGER DEFAULT 0",
)


def create_silence_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in SILENCE_DDL:
        con.execute(sql)
