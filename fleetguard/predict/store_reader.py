"""fleetguard's own store (tables gpu_samples and events) as the predictor's input contract.

A GPU is identified by its UUID. Events carry host + GPU index (or PCI bus id), so they are mapped to UUIDs
through the samples. Which events count as failures is configurable: by default fatal XIDs, a GPU fallen off
the bus, and a GPU lost; every other event kind (XIDs as `xid_<code>`) is counted as a feature.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from fleetguard.predict.contract import (
    EVENTS_VIEW,
    FAILURES_VIEW,
    SAMPLES_VIEW,
    ContractInputs,
    InputError,
    quote,
)
from fleetguard.predict.first_samples import FirstSamples
from fleetguard.records.telemetry import GpuSample
from fleetguard.store.holder import read_holder

# XIDs after which the GPU needs a reset or a repair (NVIDIA's XID catalogue): DBE, ECC page retirement
# failure, NVLink error, fallen off the bus, uncontained ECC, GSP errors, unrecovered ECC.
DEFAULT_FATAL_XIDS = (48, 62, 64, 74, 79, 92, 95, 119, 120, 140)
DEFAULT_FAILURE_KINDS = ("gpu_fallen_off_bus", "gpu_lost")
_NOT_FEATURES = {"ts", "gpu_index", "host", "uuid"}
# What a model that does not fit a store's columns is told (predict --store, live scoring).
STORE_MODEL_HINT = (
    "train one on the store's own columns (fleetguard train --store STORE --out DIR), or on a simulated "
    "history written with them (fleetguard simulate-history OUT --columns store, then train on OUT)"
)


@dataclass(frozen=True)
class FailureRule:
    """Events that count as a failure: any of `kinds`, or an XID whose code is in `fatal_xids`."""

    kinds: tuple[str, ...] = DEFAULT_FAILURE_KINDS
    fatal_xids: tuple[int, ...] = DEFAULT_FATAL_XIDS

    def sql(self) -> str:
        kinds = ", ".join("'" + k.replace("'", "''") + "'" for k in self.kinds) or "NULL"
        codes = ", ".join(str(int(c)) for c in self.fatal_xids) or "NULL"
        return f"(e.kind IN ({kinds}) OR (e.kind = 'xid' AND e.code IN ({codes})))"


def gpu_feature_columns() -> tuple[str, ...]:
    """Numeric GpuSample fields (bools as 0/1): the features a store-trained model uses."""
    hints = typing.get_type_hints(GpuSample)
    out = []
    for f in dataclasses.fields(GpuSample):
        if f.name in _NOT_FEATURES:
            continue
        base = [a for a in typing.get_args(hints[f.name]) if a is not type(None)] or [hints[f.name]]
        if base[0] in (int, float, bool):
            out.append(f.name)
    return tuple(out)


def register_store(
    con: duckdb.DuckDBPyConnection,
    rule: FailureRule = FailureRule(),
    schema: str = "",
    since_ts: float | None = None,
    until_ts: float | None = None,
    first_samples: FirstSamples | None = None,
) -> ContractInputs:
    """Register the contract views over `<schema>gpu_samples` and `<schema>events` in `con` (temp views).
    `first_samples`: a live scorer's cache of each GPU's first sample (fleetguard.predict.first_samples), kept
    between its rounds; without one a window's first samples are looked up afresh.

    Samples (and the GPUs events are mapped to) are those in [since_ts, until_ts): the bounds compare the
    stored TIMESTAMP column itself, so DuckDB skips row groups outside them instead of scanning the table.
    """
    prefix = f"{quote(schema)}." if schema else ""
    try:
        existing = {
            str(r[0])
            for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'gpu_samples'"
                + (" AND database_name = ?" if schema else ""),
                [schema] if schema else [],
            ).fetchall()
        }
    except duckdb.Error as exc:
        raise InputError(f"store: cannot read gpu_samples: {exc}") from exc
    if not existing:
        raise InputError("store: no table gpu_samples")
    columns = tuple(c for c in gpu_feature_columns() if c in existing)
    in_window = time_filter("ts", since_ts, until_ts)
    # Failures from the whole history up to `until_ts`: "hours since the last failure" looks back past any
    # window, and live scoring must compute it as training did. Other events only count inside the window.
    until_e = time_filter("e.ts", None, until_ts)
    feats = "".join(f", CAST({quote(c)} AS DOUBLE) AS {quote(c)}" for c in columns)
    samples = f"SELECT uuid AS device_id, epoch(ts) AS ts{feats} FROM {prefix}gpu_samples WHERE {in_window}"
    if since_ts is not None:
        # `__growth` is the rise since a GPU was first seen (training reads the whole history): each GPU's
        # first sample ever, older than the window, lands in a step before it, where no other feature sees it.
        table = (first_samples or FirstSamples()).register(con, prefix, columns, in_window, since_ts)
        samples += f" UNION ALL SELECT * FROM {table}"
    con.execute(f"CREATE OR REPLACE TEMP VIEW {SAMPLES_VIEW} AS {samples}")
    # Map events to GPUs through the samples: by PCI bus id when known, else by host and GPU index.
    con.execute(
        f"""CREATE OR REPLACE TEMP VIEW fg_store_events AS
        WITH gpus AS (SELECT DISTINCT host, gpu_index, pci_bus_id, uuid FROM {prefix}gpu_samples
                      WHERE {in_window})
        SELECT coalesce(
                 (SELECT any_value(g.uuid) FROM gpus g WHERE g.host = e.host AND g.pci_bus_id = e.pci_bus_id),
                 (SELECT any_value(g.uuid) FROM gpus g WHERE g.host = e.host AND g.gpu_index = e.gpu_index)
               ) AS device_id,
               epoch(e.ts) AS ts,
               CASE WHEN e.kind = 'xid' AND e.code IS NOT NULL THEN 'xid_' || e.code ELSE e.kind END AS kind,
               {rule.sql()} AS is_failure
        FROM {prefix}events e WHERE {until_e}"""
    )
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {FAILURES_VIEW} AS SELECT device_id, ts, kind FROM fg_store_events "
        "WHERE is_failure AND device_id IS NOT NULL"
    )
    events_since = "true" if since_ts is None else f"ts >= {float(since_ts)!r}"
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {EVENTS_VIEW} AS SELECT device_id, ts, kind FROM fg_store_events "
        f"WHERE NOT is_failure AND device_id IS NOT NULL AND {events_since}"
    )
    return ContractInputs(columns, ())


def _timestamp(epoch_seconds: float) -> str:
    """A TIMESTAMP literal (the store keeps naive UTC timestamps), so filters compare the column as stored."""
    moment = datetime.fromtimestamp(float(epoch_seconds), UTC).replace(tzinfo=None)
    return f"TIMESTAMP '{moment.isoformat(sep=' ', timespec='microseconds')}'"


def time_filter(column: str, since_ts: float | None, until_ts: float | None) -> str:
    """[since, until): the end is open, so a bucket that ends at `until` is complete and nothing of the
    next one is read."""
    parts = ["true"]
    if since_ts is not None:
        parts.append(f"{column} >= {_timestamp(since_ts)}")
    if until_ts is not None:
        parts.append(f"{column} < {_timestamp(until_ts)}")
    return " AND ".join(parts)


def attach_store(con: duckdb.DuckDBPyConnection, path: Path, alias: str = "fgstore") -> str:
    """Attach a store file read-only (a running agent may hold it open) and return its schema alias."""
    if not path.is_file():
        raise InputError(f"{path}: no such store file")
    literal = "'" + str(path).replace("'", "''") + "'"
    try:
        con.execute(f"ATTACH {literal} AS {quote(alias)} (READ_ONLY)")
    except duckdb.Error as exc:  # corrupt, locked by a writer, unreadable: one line, not a traceback
        holder = read_holder(str(path))
        if holder is not None:
            # Training reads the whole history, not a question for the read API; the running process
            # retrains on its own window instead (docs/retraining.md).
            raise InputError(
                f"{path} is held by {holder.describe()}, and DuckDB lets no other process open it: stop "
                "it first, or let it retrain its own model ([predictor] retrain_every_seconds)"
            ) from exc
        raise InputError(f"{path}: cannot open the store: {' '.join(str(exc).split())}") from exc
    return alias
