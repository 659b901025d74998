"""What operators did from the dashboard (store migration 11): acknowledged, silenced or resolved an incident.

An audit trail, appended only; the incident tables stay the incident engine's. Rows are few (each needs the
operator token), so the table needs no index; notes are bounded where they are written.
"""

from __future__ import annotations

import duckdb

OPERATOR_DDL = (
    """CREATE TABLE IF NOT EXISTS operator_actions (
  ts TIMESTAMP NOT NULL,
  incident_id VARCHAR NOT NULL,
  action VARCHAR NOT NULL,
  note VARCHAR NOT NULL,
  silence_until TIMESTAMP,
  outcome VARCHAR NOT NULL
)""",
)


def create_operator_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in OPERATOR_DDL:
        con.execute(sql)
