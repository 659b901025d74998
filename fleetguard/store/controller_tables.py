"""The controller's own tables (store migrations 6 and 7): the ingest ledger, hosts, commands, rollups.

They are not record tables (`fleetguard.store.schema.TABLES`): agents never send them, only the controller
writes them, and the dashboard reads them (docs/controller.md gives their meaning).
"""

from __future__ import annotations

# (host, boot_id) -> committed sequence ranges. One row per committed batch at first; the controller merges
# contiguous ranges, so the ledger stays a few rows per agent incarnation, whatever the uptime.
INGEST_LEDGER = """
CREATE TABLE IF NOT EXISTS ingest_ledger (
  host VARCHAR NOT NULL,
  boot_id VARCHAR NOT NULL,
  seq_lo BIGINT NOT NULL,
  seq_hi BIGINT NOT NULL,
  committed_ts TIMESTAMP NOT NULL,
  "rows" BIGINT NOT NULL
)"""

FLEET_HOSTS = """
CREATE TABLE IF NOT EXISTS fleet_hosts (
  host VARCHAR PRIMARY KEY,
  boot_id VARCHAR NOT NULL,
  first_seen TIMESTAMP NOT NULL,
  last_seen TIMESTAMP NOT NULL,
  last_sent TIMESTAMP NOT NULL,
  last_seq BIGINT NOT NULL,
  interval_seconds DOUBLE NOT NULL,
  batches BIGINT NOT NULL,
  "rows" BIGINT NOT NULL,
  gpus BIGINT NOT NULL,
  agent_version VARCHAR NOT NULL
)"""

HOST_COMMANDS = """
CREATE TABLE IF NOT EXISTS host_commands (
  command_id VARCHAR PRIMARY KEY,
  host VARCHAR NOT NULL,
  kind VARCHAR NOT NULL,
  job_id VARCHAR,
  reason VARCHAR NOT NULL,
  created_ts TIMESTAMP NOT NULL,
  deliveries BIGINT NOT NULL DEFAULT 0,
  last_delivered_ts TIMESTAMP,
  acked_ts TIMESTAMP,
  outcome VARCHAR,
  detail VARCHAR
)"""

_GPU_ROLLUP_COLUMNS = """
  bucket TIMESTAMP NOT NULL,
  host VARCHAR NOT NULL,
  gpu_index BIGINT NOT NULL,
  uuid VARCHAR NOT NULL,
  samples BIGINT NOT NULL,
  utilization_gpu_avg DOUBLE,
  utilization_gpu_max DOUBLE,
  memory_used_bytes_max BIGINT,
  temperature_celsius_avg DOUBLE,
  temperature_celsius_max DOUBLE,
  power_watts_avg DOUBLE,
  power_watts_max DOUBLE,
  sm_clock_mhz_avg DOUBLE,
  clocks_event_reasons_any BIGINT,
  ecc_corrected_volatile_max BIGINT,
  ecc_uncorrected_volatile_max BIGINT,
  remapped_rows_pending_any BOOLEAN,
  pcie_replay_errors_max BIGINT,
  nvlink_crc_errors_max BIGINT
"""

_NIC_ROLLUP_COLUMNS = """
  bucket TIMESTAMP NOT NULL,
  host VARCHAR NOT NULL,
  device VARCHAR NOT NULL,
  port BIGINT NOT NULL,
  counter VARCHAR NOT NULL,
  "group" VARCHAR NOT NULL,
  samples BIGINT NOT NULL,
  value_last UBIGINT NOT NULL,
  delta_sum UBIGINT,
  rate_per_second_avg DOUBLE,
  rate_per_second_max DOUBLE,
  resets BIGINT NOT NULL
"""

ROLLUP_TABLES: dict[str, str] = {
    "gpu_rollup_1m": _GPU_ROLLUP_COLUMNS,
    "gpu_rollup_1h": _GPU_ROLLUP_COLUMNS,
    "nic_rollup_1m": _NIC_ROLLUP_COLUMNS,
    "nic_rollup_1h": _NIC_ROLLUP_COLUMNS,
}

CONTROLLER_TABLES = ("ingest_ledger", "fleet_hosts", "host_commands")


def controller_ddl() -> list[str]:
    """Migration 6: what ingest, host tracking and the command channel need."""
    return [INGEST_LEDGER, FLEET_HOSTS, HOST_COMMANDS]


def rollup_ddl() -> list[str]:
    """Migration 7: the downsampled tables for long retention and the dashboard."""
    return [f"CREATE TABLE IF NOT EXISTS {name} ({cols})" for name, cols in ROLLUP_TABLES.items()]
