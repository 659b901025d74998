"""Schema versions. A store made by an older fleetguard is brought forward step by step when opened.

Each step only adds (tables, columns) and is idempotent, so a step can be re-run after a crash mid-upgrade.
A field added to a record later needs a new step with `ALTER TABLE ... ADD COLUMN IF NOT EXISTS`; the test
suite checks that every table matches its record after all steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from fleetguard.store.controller_tables import controller_ddl, rollup_ddl
from fleetguard.store.diagnosis_state_tables import create_diagnosis_state_tables
from fleetguard.store.incident_tables import (
    create_alert_tables,
    create_breaker_count_columns,
    create_breaker_headroom_columns,
    create_incident_tables,
)
from fleetguard.store.ingest_order import create_ingest_order
from fleetguard.store.model_registry import create_registry_tables
from fleetguard.store.operator_tables import create_operator_tables
from fleetguard.store.repair_tables import create_repair_tables
from fleetguard.store.schema import TABLES, quote_ident
from fleetguard.store.silence_tables import create_silence_tables


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[duckdb.DuckDBPyConnection], None]


def _create(*tables: str) -> Callable[[duckdb.DuckDBPyConnection], None]:
    def apply(con: duckdb.DuckDBPyConnection) -> None:
        for name in tables:
            con.execute(TABLES[name].create_sql())

    return apply


def _add_columns(table: str, *columns: str) -> Callable[[duckdb.DuckDBPyConnection], None]:
    """Add record fields to a table made by an older version (a new store has them from its CREATE)."""

    def apply(con: duckdb.DuckDBPyConnection) -> None:
        by_name = {c.name: c for c in TABLES[table].columns}
        for name in columns:
            column = by_name[name]
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {quote_ident(name)} {column.sql_type}")

    return apply


def _execute(statements: Callable[[], list[str]]) -> Callable[[duckdb.DuckDBPyConnection], None]:
    """Tables that are not records' (the controller's): their DDL comes from the module that owns them."""

    def apply(con: duckdb.DuckDBPyConnection) -> None:
        for sql in statements():
            con.execute(sql)

    return apply


def _all(
    *steps: Callable[[duckdb.DuckDBPyConnection], None],
) -> Callable[[duckdb.DuckDBPyConnection], None]:
    def apply(con: duckdb.DuckDBPyConnection) -> None:
        for step in steps:
            step(con)

    return apply


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "telemetry: GPU and NIC samples, NIC counters, events",
        _create("gpu_samples", "nic_samples", "nic_counters", "events"),
    ),
    Migration(
        2,
        "training runtime: heartbeats, step timings, collective progress, findings, actions",
        _create("heartbeats", "step_timings", "collective_progress", "findings", "actions"),
    ),
    Migration(3, "failure predictor: live predictions", _create("predictions")),
    Migration(
        5,
        "real GPUs: slow-field read time, violation times, GPM profiling metrics",
        _add_columns(
            "gpu_samples",
            "slow_read_ts",
            "violation_power_seconds",
            "violation_thermal_seconds",
            "gpm_sm_activity_percent",
            "gpm_sm_occupancy_percent",
            "gpm_tensor_activity_percent",
            "gpm_dram_bandwidth_percent",
            "nvlink_tx_bytes_per_second",
            "nvlink_rx_bytes_per_second",
        ),
    ),
    Migration(6, "fleet controller: ingest ledger, hosts, host commands", _execute(controller_ddl)),
    Migration(7, "fleet controller: 1-minute and 1-hour GPU and NIC rollups", _execute(rollup_ddl)),
    Migration(8, "incidents: incidents, evidence, action ledger, openings, breaker", create_incident_tables),
    Migration(9, "alerts: webhook outbox and delivery attempts", create_alert_tables),
    Migration(
        10,
        "failure predictor: the features behind each prediction",
        _add_columns("predictions", "explanations"),
    ),
    Migration(11, "dashboard: operators' acknowledgements, silences and resolutions", create_operator_tables),
    Migration(12, "fleet controller: the host each action was taken on", _add_columns("actions", "host")),
    Migration(13, "alerts: silences, the outbox's send order, incidents' flap counts", create_silence_tables),
    Migration(14, "repairs: what each Slurm drain led to and whether it held", create_repair_tables),
    Migration(15, "failure predictor: the model registry and its log", create_registry_tables),
    Migration(
        16,
        "diagnosis: the order rows were stored in, where the rounds got to and what they carry over",
        _all(create_ingest_order, create_diagnosis_state_tables),
    ),
    Migration(
        17,
        "failure predictor: each prediction's base rate beside its risk",
        _add_columns("predictions", "base_rate"),
    ),
    Migration(
        18,
        "incidents: what the repair breaker counted (on the action ledger) and its last reset",
        create_breaker_count_columns,
    ),
    Migration(
        19,
        "incidents: how near the repair breaker and the rate limit were at the last round",
        create_breaker_headroom_columns,
    ),
)

CURRENT_VERSION = MIGRATIONS[-1].version

META_SQL = "CREATE TABLE IF NOT EXISTS fleetguard_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)"


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The store's version; 0 for a new, empty database."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    if "fleetguard_meta" not in tables:
        return 0
    row = con.execute("SELECT value FROM fleetguard_meta WHERE key = 'schema_version'").fetchall()
    return int(row[0][0]) if row else 0


def schema_behind(con: duckdb.DuckDBPyConnection) -> str | None:
    """One line for a reader of a store older than this fleetguard (opened read-only, so not brought
    forward): what a query's missing column or table means, and what to do. None when the store is current."""
    version = schema_version(con)
    if version >= CURRENT_VERSION:
        return None
    return (
        f"the store is at schema version {version}, older than this fleetguard's {CURRENT_VERSION}, and a "
        "read-only reader does not bring it forward: run this version's controller, `up` or agent on it once "
        "(they migrate it when they open it), or read it with the fleetguard that wrote it"
    )


def migrate(con: duckdb.DuckDBPyConnection, target: int = CURRENT_VERSION) -> list[int]:
    """Apply every step above the store's version up to `target`; return the versions applied."""
    current = schema_version(con)
    con.execute(META_SQL)
    if current > CURRENT_VERSION:
        raise RuntimeError(
            f"store schema version {current} is newer than this fleetguard understands ({CURRENT_VERSION}); "
            "upgrade fleetguard"
        )
    applied = []
    for step in MIGRATIONS:
        if current < step.version <= target:
            con.execute("BEGIN TRANSACTION")
            try:
                step.apply(con)
                con.execute(
                    "INSERT OR REPLACE INTO fleetguard_meta VALUES ('schema_version', ?)", [str(step.version)]
                )
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
            applied.append(step.version)
    return applied
