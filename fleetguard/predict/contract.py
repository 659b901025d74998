"""The predictor's input contract: per-device samples and failure events, from Parquet or CSV files.

The readers register DuckDB views with fixed shapes (times as epoch seconds), so everything downstream is
SQL over the same three views whatever the source: `fg_samples(device_id, ts, <numeric features>)`,
`fg_failures(device_id, ts, kind)` and `fg_events(device_id, ts, kind)`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import duckdb

from predictor.views import EVENTS_VIEW, FAILURES_VIEW, SAMPLES_VIEW, quote

__all__ = ["EVENTS_VIEW", "FAILURES_VIEW", "SAMPLES_VIEW", "ContractInputs", "InputError", "quote"]

_NUMERIC_PREFIXES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
    "BOOLEAN",
    "REAL",
)
_TIME_TYPES = ("TIMESTAMP", "DATE")


MAX_CATEGORY_VALUES = 256  # a text column with more distinct values is an identifier, not a category


class InputError(ValueError):
    """Bad predictor input: names the file and the column at fault."""


@dataclass(frozen=True)
class ContractInputs:
    """What the readers registered: the numeric feature columns, the text (categorical) ones, in file order,
    and the ignored ones."""

    feature_columns: tuple[str, ...]
    ignored_columns: tuple[str, ...]
    categorical_columns: tuple[str, ...] = ()

    @property
    def all_columns(self) -> tuple[str, ...]:
        return (*self.feature_columns, *self.categorical_columns)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _files(path: Path) -> tuple[list[Path], str]:
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_dir():
        for fmt, pattern in (("parquet", "*.parquet"), ("csv", "*.csv")):
            found = sorted(path.rglob(pattern))
            if found:
                return found, fmt
        raise InputError(f"{path}: directory holds no .parquet or .csv files")
    fmt = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    return [path], fmt


def _source_sql(files: list[Path], fmt: str) -> str:
    listed = "[" + ", ".join(_literal(str(f)) for f in files) + "]"
    if fmt == "parquet":
        return f"read_parquet({listed}, union_by_name = true)"
    return f"read_csv({listed}, union_by_name = true, header = true)"


def _describe(con: duckdb.DuckDBPyConnection, source: str, where: Path) -> dict[str, str]:
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
    except duckdb.Error as exc:
        raise InputError(f"{where}: cannot read: {exc}") from exc
    return {str(r[0]): str(r[1]).upper() for r in rows}


def _ts_expr(con: duckdb.DuckDBPyConnection, source: str, column_type: str, where: Path) -> str:
    """SQL turning the `ts` column into epoch seconds; checks text times parse."""
    if column_type.startswith(_TIME_TYPES):
        return "epoch(CAST(ts AS TIMESTAMPTZ))"
    if column_type.startswith(_NUMERIC_PREFIXES):
        return "CAST(ts AS DOUBLE)"
    bad = con.execute(
        f"SELECT any_value(ts), count(*) FROM {source} "
        "WHERE ts IS NOT NULL AND TRY_CAST(CAST(ts AS VARCHAR) AS TIMESTAMPTZ) IS NULL"
    ).fetchone()
    if bad is not None and bad[1]:
        raise InputError(
            f"{where}: column ts: {bad[1]} value(s) are not a time (ISO 8601 or epoch seconds), "
            f"e.g. {bad[0]!r}"
        )
    return "epoch(TRY_CAST(CAST(ts AS VARCHAR) AS TIMESTAMPTZ))"


def _check_not_empty(con: duckdb.DuckDBPyConnection, source: str, where: Path) -> None:
    try:
        row = con.execute(f"SELECT count(*) FROM {source}").fetchone()
    except duckdb.Error as exc:
        raise InputError(f"{where}: cannot read: {exc}") from exc
    if row is None or row[0] == 0:
        raise InputError(f"{where}: no rows")


def _require(columns: dict[str, str], names: tuple[str, ...], where: Path) -> None:
    for name in names:
        if name not in columns:
            raise InputError(f"{where}: missing column {name!r} (has: {', '.join(columns) or 'none'})")


def register_samples(con: duckdb.DuckDBPyConnection, path: Path) -> ContractInputs:
    """Register `fg_samples` over a file or directory of samples. Numeric columns are features; text columns
    (a model, SKU, driver version, rack) are categorical features unless they look like identifiers (more
    than MAX_CATEGORY_VALUES distinct values); other columns are ignored with a warning."""
    con.execute("SET TimeZone = 'UTC'")
    files, fmt = _files(path)
    source = _source_sql(files, fmt)
    columns = _describe(con, source, path)
    _require(columns, ("device_id", "ts"), path)
    _check_not_empty(con, source, path)
    ts_sql = _ts_expr(con, source, columns["ts"], path)
    features = tuple(
        c for c, t in columns.items() if c not in ("device_id", "ts") and t.startswith(_NUMERIC_PREFIXES)
    )
    texts = tuple(c for c, t in columns.items() if c not in ("device_id", "ts") and t.startswith("VARCHAR"))
    categorical = tuple(c for c in texts if _distinct(con, source, c, path) <= MAX_CATEGORY_VALUES)
    ignored = tuple(
        c for c in columns if c not in ("device_id", "ts") and c not in features and c not in categorical
    )
    if ignored:
        warnings.warn(
            f"{path}: ignoring non-numeric columns: {', '.join(ignored)}", UserWarning, stacklevel=2
        )
    if not features:
        raise InputError(f"{path}: no numeric feature column besides device_id and ts")
    feature_sql = "".join(f", CAST({quote(c)} AS DOUBLE) AS {quote(c)}" for c in features)
    feature_sql += "".join(f", {quote(c)}" for c in categorical)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {SAMPLES_VIEW} AS SELECT CAST(device_id AS VARCHAR) AS device_id, "
        f"{ts_sql} AS ts{feature_sql} FROM {source} WHERE device_id IS NOT NULL AND ts IS NOT NULL"
    )
    return ContractInputs(features, ignored, categorical)


def _distinct(con: duckdb.DuckDBPyConnection, source: str, column: str, where: Path) -> int:
    try:
        row = con.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT {quote(column)} FROM {source} LIMIT ?)",
            [MAX_CATEGORY_VALUES + 1],
        ).fetchone()
    except duckdb.Error as exc:
        raise InputError(f"{where}: cannot read column {column!r}: {exc}") from exc
    return int(row[0]) if row else 0


def _register_events(con: duckdb.DuckDBPyConnection, path: Path | None, view: str, default_kind: str) -> None:
    if path is None:
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT CAST(NULL AS VARCHAR) AS device_id, "
            "CAST(NULL AS DOUBLE) AS ts, CAST(NULL AS VARCHAR) AS kind WHERE false"
        )
        return
    files, fmt = _files(path)
    source = _source_sql(files, fmt)
    columns = _describe(con, source, path)
    _require(columns, ("device_id", "ts"), path)
    ts_sql = _ts_expr(con, source, columns["ts"], path)
    kind_sql = "CAST(kind AS VARCHAR)" if "kind" in columns else _literal(default_kind)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT CAST(device_id AS VARCHAR) AS device_id, "
        f"{ts_sql} AS ts, "
        f"coalesce({kind_sql}, {_literal(default_kind)}) AS kind FROM {source} "
        "WHERE device_id IS NOT NULL AND ts IS NOT NULL"
    )


def register_failures(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Register `fg_failures` (device_id, ts, kind); `kind` defaults to 'failure'."""
    con.execute("SET TimeZone = 'UTC'")
    _register_events(con, path, FAILURES_VIEW, "failure")


def register_events(con: duckdb.DuckDBPyConnection, path: Path | None) -> None:
    """Register `fg_events` (non-failure events counted as features), empty when no path is given."""
    _register_events(con, path, EVENTS_VIEW, "event")


def register_inputs(
    con: duckdb.DuckDBPyConnection, samples: Path, failures: Path | None, events: Path | None = None
) -> ContractInputs:
    """Register the three contract views; with no failures file every device is taken as never failed."""
    inputs = register_samples(con, samples)
    if failures is None:
        _register_events(con, None, FAILURES_VIEW, "failure")
    else:
        register_failures(con, failures)
    register_events(con, events)
    return inputs
