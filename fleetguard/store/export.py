"""Exporting every table of a store to Parquet: the telemetry tables hive-partitioned by day and host
(`OUT/<table>/dt=YYYY-MM-DD/host=H/*.parquet`, what `fleetguard query --lake` and the predictor read), every
other table (incidents, their evidence and actions, alerts, the controller's hosts ...) as one file,
`OUT/<table>/<table>.parquet`.

Two ways in, one layout out: straight from a store nothing else holds (`fleetguard export`), or from a running
process (`fleetguard controller`, `up`) that writes a consistent snapshot of every table (one transaction)
that the command fetches through the read API and lays out here the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from fleetguard.store.schema import TABLES

if TYPE_CHECKING:
    import duckdb

INTERNAL: Final = frozenset({"fleetguard_meta"})  # the schema version: not data
# Columns an export for someone other than an operator leaves out (as the read API does): with a host's
# boot id, another host could forge the message ids of its batches.
OPERATOR_ONLY: Final = {"fleet_hosts": ("boot_id",), "ingest_ledger": ("boot_id",)}


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def exportable_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()
    return [str(r[0]) for r in rows if str(r[0]) not in INTERNAL]


def write_layout(
    con: duckdb.DuckDBPyConnection,
    out: Path,
    names: Iterable[str],
    source: Callable[[str], str] = lambda name: name,
) -> dict[str, int]:
    """Each table of `names` with rows, read from `source(name)` (a table, or read_parquet(...)), into its
    directory under `out` (replaced whole: a repeated export never duplicates rows); rows per table."""
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}
    for name in names:
        src = source(name)
        row = con.execute(f"SELECT count(*) FROM {src}").fetchone()
        count = int(row[0]) if row else 0
        if count == 0:
            continue
        table = TABLES.get(name)
        if table is not None:
            partitions = "dt, host" if table.partition_by_host else "dt"
            con.execute(
                f"COPY (SELECT *, CAST(ts AS DATE) AS dt FROM {src}) TO {quote_literal(str(out / name))} "
                f"(FORMAT parquet, PARTITION_BY ({partitions}), OVERWRITE true)"
            )
        else:
            target = out / name
            target.mkdir(exist_ok=True)
            for old in target.glob("*.parquet"):
                old.unlink()
            con.execute(
                f"COPY (SELECT * FROM {src}) TO {quote_literal(str(target / (name + '.parquet')))} "
                "(FORMAT parquet)"
            )
        written[name] = count
    return written


# A snapshot's table is written in parts of about this size (whole Parquet row groups), so each answer that
# carries one is bounded however large the table: a controller's month of GPU samples is many parts.
PART_BYTES: Final = "64MB"


def write_snapshot(con: duckdb.DuckDBPyConnection, out: Path, *, operator: bool) -> dict[str, int]:
    """Every table as Parquet parts `out/<table>/data_<n>.parquet`, all read in one transaction (a
    consistent snapshot while the writer goes on); rows per table. `operator` False leaves out the
    operator-only columns."""
    written: dict[str, int] = {}
    con.execute("BEGIN TRANSACTION")
    try:
        for name in exportable_tables(con):
            hidden = () if operator else OPERATOR_ONLY.get(name, ())
            select = f"SELECT * EXCLUDE ({', '.join(hidden)})" if hidden else "SELECT *"
            row = con.execute(f"SELECT count(*) FROM {name}").fetchone()
            written[name] = int(row[0]) if row else 0
            if written[name] == 0:
                continue
            target = quote_literal(str(out / name))
            con.execute(
                f"COPY ({select} FROM {name}) TO {target} (FORMAT parquet, FILE_SIZE_BYTES '{PART_BYTES}')"
            )
    finally:
        con.execute("ROLLBACK")  # read only: nothing to keep
    return written


def parts(directory: Path) -> list[str]:
    """The part files of one table of a snapshot, in order."""
    if not directory.is_dir():
        return []
    return sorted((p.name for p in directory.glob("*.parquet")), key=lambda n: (len(n), n))


def _source(snapshot: Path, name: str) -> str:
    return f"read_parquet({quote_literal(str(snapshot / name / '*.parquet'))})"


def fetch_snapshot(base: str, token: str | None, into: Path) -> dict[str, int]:
    """Ask the running process at `base` for a snapshot of every table and fetch the parts of each table with
    rows into `into/<table>/`; rows per table. ReadApiError if it cannot."""
    from fleetguard.read_client import ReadApiError, get_json, request

    doc = get_json(base, "/v1/export", token, method="POST", doc={})
    export_id, tables, files = doc.get("export_id"), doc.get("tables"), doc.get("files")
    if not isinstance(export_id, str) or not isinstance(tables, dict) or not isinstance(files, dict):
        raise ReadApiError(f"{base}/v1/export answered no export")
    into.mkdir(parents=True, exist_ok=True)
    fetched: dict[str, int] = {}
    for name, rows in sorted(tables.items()):
        names = files.get(name)
        if not isinstance(rows, int) or rows <= 0 or not name.isidentifier() or not isinstance(names, list):
            continue
        (into / name).mkdir()
        for part in names:
            if not isinstance(part, str) or not _PART.fullmatch(part):
                raise ReadApiError(f"{base}/v1/export named a part {str(part)[:40]!r}")
            _, body = request(base, f"/v1/export/{export_id}/{name}/{part}", token)
            (into / name / part).write_bytes(body)
        fetched[name] = rows
    return fetched


_PART = re.compile(r"data_[0-9]{1,6}\.parquet")


def layout_from_snapshot(snapshot: Path, out: Path, names: Iterable[str]) -> dict[str, int]:
    """The fetched snapshot laid out as `fleetguard export` lays out a store (write_layout)."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        return write_layout(con, out, names, lambda name: _source(snapshot, name))
    finally:
        con.close()


def snapshot_views(con: duckdb.DuckDBPyConnection, snapshot: Path, names: Iterable[str]) -> None:
    """A view per fetched table, so code that reads a store's tables by name reads the snapshot; every other
    table of the schema is there empty (a snapshot carries tables with rows only, and a query of a table
    with none yet, such as `events` on a quiet fleet, answers no rows rather than "no such table")."""
    from fleetguard.store.migrations import migrate

    migrate(con)
    for name in names:
        con.execute(f"DROP TABLE IF EXISTS {name}")
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {_source(snapshot, name)}")
