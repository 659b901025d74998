"""`fleetguard query SQL --lake DIR`: every controller's Parquet export queried together with DuckDB.

The lake is one directory per controller, each what `fleetguard export --parquet` writes there:
`DIR/<controller>/<table>/dt=YYYY-MM-DD[/host=H]/*.parquet`. Each store table found under any controller
becomes a view of that name over all of them (read_parquet with hive partitioning, columns matched by
name so exports of different schema versions mix), with a `controller` column naming the directory it
came from. The SQL runs in an in-memory DuckDB: nothing in the lake is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from fleetguard.store.schema import TABLES

MAX_CELL_CHARS = 200


class LakeError(Exception):
    """The lake cannot be read or the query failed; one line."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def lake_tables(lake: Path) -> dict[str, list[str]]:
    """Store tables present in the lake -> the controllers (directory names) that exported them."""
    if not lake.is_dir():
        raise LakeError(f"--lake {lake}: not a directory")
    found: dict[str, list[str]] = {}
    for controller in sorted(p for p in lake.iterdir() if p.is_dir()):
        for name in TABLES:
            if (controller / name).is_dir() and any((controller / name).rglob("*.parquet")):
                found.setdefault(name, []).append(controller.name)
    return found


def open_lake(lake: Path) -> tuple[duckdb.DuckDBPyConnection, dict[str, list[str]]]:
    """An in-memory DuckDB with one view per table found in the lake."""
    tables = lake_tables(lake)
    if not tables:
        raise LakeError(
            f"--lake {lake}: no exported tables (expected DIR/<controller>/<table>/.../*.parquet)"
        )
    con = duckdb.connect(":memory:")
    root = str(lake.resolve())
    for name in tables:
        pattern = _literal(f"{root}/*/{name}/**/*.parquet")
        # The controller is the path component right under the lake directory.
        controller = f"split_part(filename[{len(root) + 2}:], '/', 1)"
        con.execute(
            f"CREATE VIEW {name} AS SELECT * EXCLUDE (filename), {controller} AS controller "
            f"FROM read_parquet({pattern}, hive_partitioning = true, union_by_name = true, filename = true)"
        )
    return con, tables


def run_query(lake: Path, sql: str, max_rows: int) -> QueryResult:
    con, _ = open_lake(lake)
    try:
        return query_connection(con, sql, max_rows)
    finally:
        con.close()


def query_connection(con: duckdb.DuckDBPyConnection, sql: str, max_rows: int) -> QueryResult:
    """`sql` on `con` (a lake's views, a store opened read-only, a running process's snapshot)."""
    try:
        cursor = con.execute(sql)
        columns = [str(d[0]) for d in cursor.description or []]
        rows = cursor.fetchmany(max_rows) if columns else []
        return QueryResult(columns, rows)
    except duckdb.Error as exc:
        raise LakeError(" ".join(str(exc).split())) from exc


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    text = str(value).replace("\n", " ")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def render_table(result: QueryResult) -> str:
    cells = [[_cell(v) for v in row] for row in result.rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(result.columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(result.columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines) + "\n"
