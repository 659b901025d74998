"""What a diagnosis round leaves for the next one beyond the incidents (schema 16), written in the round's
transaction so a restart takes up exactly where the last committed round stopped:
- `diagnosis_feed_marks`: how far each followed table was read, in ingest sequence values;
- `diagnosis_pending`: faults seen but still below their thresholds (bursts, counts, evidence so far);
- `diagnosis_clearing`: open incidents whose fault cleared, waiting out the flap window.
"""

from __future__ import annotations

import duckdb

DIAGNOSIS_STATE_DDL = (
    """CREATE TABLE IF NOT EXISTS diagnosis_feed_marks (
  table_name VARCHAR PRIMARY KEY,
  floor BIGINT NOT NULL,
  seen_json VARCHAR NOT NULL,
  horizon_json VARCHAR NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS diagnosis_pending (
  incident_key VARCHAR PRIMARY KEY,
  first_seen DOUBLE NOT NULL,
  state_json VARCHAR NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS diagnosis_clearing (
  incident_id VARCHAR PRIMARY KEY,
  cleared_at DOUBLE NOT NULL
)""",
)


def create_diagnosis_state_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in DIAGNOSIS_STATE_DDL:
        con.execute(sql)
