"""Tables of incidents, their evidence and action ledger, the breaker, and the alert outbox (schema 8, 9;
18: what the breaker counted, on the ledger lines, and when it was last reset).

Unlike the telemetry tables these rows change (an incident moves open -> acting -> resolved -> closed, an
outbox row from pending to delivered), so they have primary keys and explicit DDL instead of being derived
from append-only records; retention does not touch them. Times are TIMESTAMP (UTC), like every table.
"""

from __future__ import annotations

import duckdb

INCIDENT_DDL = (
    """CREATE TABLE IF NOT EXISTS incidents (
  incident_id VARCHAR PRIMARY KEY,
  incident_key VARCHAR NOT NULL,
  host VARCHAR NOT NULL,
  component_kind VARCHAR NOT NULL,
  component_id VARCHAR NOT NULL,
  fault VARCHAR NOT NULL,
  state VARCHAR NOT NULL,
  severity VARCHAR NOT NULL,
  action VARCHAR NOT NULL,
  rule VARCHAR NOT NULL,
  summary VARCHAR NOT NULL,
  first_seen TIMESTAMP NOT NULL,
  last_seen TIMESTAMP NOT NULL,
  occurrences BIGINT NOT NULL,
  opened_at TIMESTAMP NOT NULL,
  resolved_at TIMESTAMP,
  closed_at TIMESTAMP,
  resolution VARCHAR NOT NULL,
  returns INTEGER NOT NULL,
  escalation_step INTEGER NOT NULL,
  sticky_seconds DOUBLE NOT NULL,
  updated_at TIMESTAMP NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS incidents_key ON incidents (incident_key)",
    """CREATE TABLE IF NOT EXISTS incident_evidence (
  incident_id VARCHAR NOT NULL,
  ts TIMESTAMP NOT NULL,
  kind VARCHAR NOT NULL,
  detail_json VARCHAR NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS incident_actions (
  action_id VARCHAR PRIMARY KEY,
  incident_id VARCHAR NOT NULL,
  host VARCHAR NOT NULL,
  action VARCHAR NOT NULL,
  rule VARCHAR NOT NULL,
  requested_at TIMESTAMP NOT NULL,
  outcome VARCHAR NOT NULL,
  finished_at TIMESTAMP,
  detail VARCHAR NOT NULL,
  fault_returned BOOLEAN NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS incident_openings (
  incident_key VARCHAR NOT NULL,
  ts TIMESTAMP NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS breaker_state (
  id INTEGER PRIMARY KEY,
  tripped BOOLEAN NOT NULL,
  tripped_at TIMESTAMP,
  reason VARCHAR NOT NULL,
  updated_at TIMESTAMP NOT NULL
)""",
)

ALERT_DDL = (
    """CREATE TABLE IF NOT EXISTS alert_outbox (
  alert_id VARCHAR PRIMARY KEY,
  endpoint VARCHAR NOT NULL,
  incident_id VARCHAR NOT NULL,
  event VARCHAR NOT NULL,
  severity VARCHAR NOT NULL,
  created_at TIMESTAMP NOT NULL,
  body_json VARCHAR NOT NULL,
  status VARCHAR NOT NULL,
  attempts INTEGER NOT NULL,
  next_attempt_at TIMESTAMP NOT NULL,
  delivered_at TIMESTAMP,
  last_error VARCHAR NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS alert_outbox_status ON alert_outbox (status)",
    """CREATE TABLE IF NOT EXISTS alert_deliveries (
  alert_id VARCHAR NOT NULL,
  endpoint VARCHAR NOT NULL,
  attempt INTEGER NOT NULL,
  ts TIMESTAMP NOT NULL,
  status_code INTEGER,
  outcome VARCHAR NOT NULL,
  error VARCHAR NOT NULL,
  duration_seconds DOUBLE NOT NULL
)""",
)


BREAKER_COUNT_DDL = (
    # Each ledger line says whether the breaker counted it: the breaker's window and rate limit are
    # rebuilt from these lines on start, so its count is written with the action, never apart from it.
    "ALTER TABLE incident_actions ADD COLUMN IF NOT EXISTS breaker_counted BOOLEAN DEFAULT FALSE",
    # Lines from before this step: a request that went ahead was counted, unless it was a retry (whose detail
    # the engine starts with "retry" while it runs and "attempt" once it ended); held, deferred and skipped
    # ones were not. Run once, on a store no newer fleetguard has written to.
    "UPDATE incident_actions SET breaker_counted = outcome IN ('requested', 'succeeded', 'failed') "
    "AND NOT (detail LIKE 'retry %' OR detail LIKE 'attempt %')",
    # The last operator reset: the breaker's window counts only hosts acted on since.
    "ALTER TABLE breaker_state ADD COLUMN IF NOT EXISTS acted_since TIMESTAMP",
)


# How near the breaker was to tripping at the last round (diagnosis.breaker.BreakerHeadroom), for operators.
BREAKER_HEADROOM_DDL = tuple(
    f"ALTER TABLE breaker_state ADD COLUMN IF NOT EXISTS {column} {kind}"
    for column, kind in (
        ("fleet_hosts", "INTEGER"),
        ("hosts_acted", "INTEGER"),
        ("window_seconds", "DOUBLE"),
        ("trips_at_hosts", "INTEGER"),
        ("repairs_last_hour", "INTEGER"),
        ("repairs_per_hour", "INTEGER"),
        ("headroom_at", "TIMESTAMP"),
    )
)


def create_breaker_headroom_columns(con: duckdb.DuckDBPyConnection) -> None:
    for sql in BREAKER_HEADROOM_DDL:
        con.execute(sql)


def create_breaker_count_columns(con: duckdb.DuckDBPyConnection) -> None:
    for sql in BREAKER_COUNT_DDL:
        con.execute(sql)


def create_incident_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in INCIDENT_DDL:
        con.execute(sql)


def create_alert_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in ALERT_DDL:
        con.execute(sql)


def ts_sql(placeholder: str = "?") -> str:
    """Epoch seconds (a parameter) as a UTC TIMESTAMP, the way the store writes every time."""
    return f"make_timestamp(CAST(round({placeholder} * 1000000) AS BIGINT))"


def epoch_sql(column: str) -> str:
    """A TIMESTAMP column as epoch seconds."""
    return f"(epoch_us({column}) / 1000000.0)"
