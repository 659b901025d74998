"""The store: one DuckDB file, written in batches by one process (the agent, or `fleetguard up`).

One DuckDB connection is not safe for two threads at once (they share its transaction and its registered
views), so every use of it here holds the store's lock; other threads read through their own `cursor()`.

Two write paths, both one statement per table per batch, never row-by-row:
- `append(records)`: record dataclasses (the agent's path). Columns travel as list parameters cast to the
  type each column's SQL type says, so the agent needs neither numpy, pandas nor pyarrow.
- `append_columns(table, frame)`: a pandas DataFrame, Arrow table or dict of columns (bulk ingest), scanned by
  DuckDB in place.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from fleetguard.store.engine_limits import EngineLimits as EngineLimits  # re-exported
from fleetguard.store.holder import Holder, read_holder
from fleetguard.store.ingest_order import ORDERED_TABLES, SEQ_COLUMN, statement_seq_sql
from fleetguard.store.location import UnsafeStoreLocation, check_store_location
from fleetguard.store.migrations import CURRENT_VERSION, migrate, schema_version
from fleetguard.store.schema import TABLE_BY_RECORD, TABLES, Column, Table, quote_ident
from fleetguard.store.unstorable import (
    UnstorableRows,
    bad_integers,
    bad_timestamps,
    integer_type,
    integers_ok,
    timestamps_ok,
)

log = logging.getLogger(__name__)

_BATCH_VIEW = "__fleetguard_batch"


class StoreError(Exception):
    """A store operation that cannot succeed as asked; the message says why and what to do."""


class StoreLocked(StoreError):
    """Another process holds the store's write lock; `holder` says which when it announced itself."""

    def __init__(self, message: str, holder: Holder | None = None) -> None:
        super().__init__(message)
        self.holder = holder

    @classmethod
    def of(cls, target: str) -> StoreLocked:
        holder = read_holder(target)
        if holder is None:
            who = "another process (a running `fleetguard controller`, `fleetguard up` or `fleetguard agent`)"
        else:
            who = holder.describe()
        return cls(
            f"store {target} is open for writing by {who}; stop it first, or point this command at another "
            "store",
            holder,
        )


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _epoch_to_timestamp(expr: str) -> str:
    # Microsecond precision, UTC: make_timestamp(BIGINT microseconds) involves no time zone.
    return f"make_timestamp(CAST(round(({expr}) * 1000000) AS BIGINT))"


class Store:
    """A fleetguard DuckDB file. Use `Store.open`; close it (or use `with`) to release the lock."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str, read_only: bool) -> None:
        self._con = con
        self._lock = threading.RLock()
        self.path = path
        self.read_only = read_only
        self._insert_sql: dict[str, str] = {}
        self._ordered: bool | None = None  # the store numbers its rows (schema 16 and later)
        self._getters = {t.name: operator.attrgetter(*t.column_names) for t in TABLES.values()}

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        read_only: bool = False,
        must_exist: bool = False,
        schema_version_target: int = CURRENT_VERSION,
        limits: EngineLimits | None = None,
        on_connect: Callable[[], object] | None = None,
    ) -> Store:
        """Open (creating and migrating as needed) the store at `path`; ":memory:" for a throwaway one.

        `limits` bounds DuckDB's worker threads and memory for this process (a database opened once per
        process: they hold for every cursor); by default DuckDB starts a worker per core and may use 80% of
        RAM, right for a controller, not for an agent beside a training job. `must_exist` for an operator's
        command that changes a store (a typo must not leave a fresh, empty one behind). `on_connect` runs once
        the database is open, before migrations (the agent gives back DuckDB's start-up pages there)."""
        target = str(path)
        if target != ":memory:":
            if (read_only or must_exist) and not Path(target).exists():
                raise StoreError(f"no store at {target}: run `fleetguard up` or `fleetguard agent` first")
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            if not read_only:
                try:
                    check_store_location(Path(target))
                except UnsafeStoreLocation as exc:
                    raise StoreError(str(exc)) from exc
        try:
            con = duckdb.connect(target, read_only=read_only, config=limits.config() if limits else {})
            if limits is not None:
                limits.apply_after_connect(con)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked.of(target) from exc
            raise StoreError(f"cannot open store {target}: {exc}") from exc
        except duckdb.Error as exc:
            raise StoreError(f"cannot open store {target}: {exc}") from exc
        if on_connect is not None:
            try:
                on_connect()
            except BaseException:
                con.close()  # the write lock with it
                raise
        if read_only:
            version = schema_version(con)
            if version > CURRENT_VERSION:
                con.close()
                raise StoreError(f"store {target} has schema version {version}, newer than this fleetguard")
        else:
            try:
                migrate(con, schema_version_target)
            except RuntimeError as exc:
                con.close()
                raise StoreError(f"store {target}: {exc}") from exc
        return cls(con, target, read_only)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, for reads on the thread that opened the store (another thread reads through
        its own `cursor()`). Writes go through `append` / `append_columns`."""
        return self._con

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to this store, for reads on another thread."""
        with self._lock:
            return self._con.cursor()

    @property
    def schema_version(self) -> int:
        with self._lock:
            return schema_version(self._con)

    def close(self) -> None:
        with self._lock:
            self._con.close()

    # ---- writes ---------------------------------------------------------------------------------------

    def append(self, records: Iterable[object]) -> int:
        """Store record dataclasses of any known type, one INSERT per table, all in one transaction.

        UnstorableRows (nothing written) names the records holding a value their column cannot hold."""
        by_table: dict[str, list[object]] = {}
        for record in records:
            table = TABLE_BY_RECORD.get(type(record))
            if table is None:
                raise StoreError(f"no table stores records of type {type(record).__name__}")
            by_table.setdefault(table.name, []).append(record)
        if not by_table:
            return 0
        with self._lock, self._transaction() as tx:
            for name, rows in by_table.items():
                self._insert_rows(tx, TABLES[name], rows)
        return sum(len(rows) for rows in by_table.values())

    def _insert_rows(self, tx: _Transaction, table: Table, rows: Sequence[object]) -> None:
        getter = self._getters[table.name]
        if len(table.columns) == 1:
            columns: list[Sequence[Any]] = [[getter(r) for r in rows]]
        else:
            columns = list(zip(*map(getter, rows), strict=True))
        # Columns travel as typed list parameters that DuckDB unnests: no numpy in the agent (~15 MB of its
        # RSS) for ~6% more CPU than numpy arrays at the agent's flush size (~1,000 records), ~2x on batches
        # of 5,000 (BENCHMARKS.md, issue 22). Values a column cannot hold are named first, before any SQL.
        unfit: dict[int, str] = {}
        for column, values in zip(table.columns, columns, strict=True):
            unfit.update(_unfit(column, values))
        if unfit:
            # Named here, before any SQL: the caller sets exactly these rows aside and stores the rest.
            raise UnstorableRows(table.name, [(rows[i], reason) for i, reason in sorted(unfit.items())])
        self._con.execute(self._records_insert_sql(table), [list(values) for values in columns])

    def _records_insert_sql(self, table: Table) -> str:
        sql = self._insert_sql.get(table.name)
        if sql is None:
            # Each list is cast to its column's type before it is unnested: inferring the type from the values
            # would make a batch mixing small counters and one past 2**63 a rounded DOUBLE.
            lists = ", ".join(
                f"unnest(${i}::{'DOUBLE' if c.is_timestamp else c.sql_type}[]) AS {quote_ident(c.name)}"
                for i, c in enumerate(table.columns, start=1)
            )
            exprs = [
                _epoch_to_timestamp(quote_ident(c.name)) if c.is_timestamp else quote_ident(c.name)
                for c in table.columns
            ]
            names = [quote_ident(n) for n in table.column_names]
            self._statement_seq(table.name, names, exprs)
            target = f"{table.name} ({', '.join(names)})"
            sql = f"INSERT INTO {target} SELECT {', '.join(exprs)} FROM (SELECT {lists})"
            self._insert_sql[table.name] = sql
        return sql

    def _statement_seq(self, table: str, names: list[str], exprs: list[str]) -> None:
        """One ingest sequence value for the whole statement where the table keeps one (schema 16): the
        column's per-row default would cost more than the rest of a bulk append."""
        if table not in ORDERED_TABLES:
            return
        if self._ordered is None:
            found = self._con.execute(
                "SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ?",
                [table, SEQ_COLUMN],
            ).fetchone()
            self._ordered = bool(found and found[0])
        if self._ordered:
            names.append(quote_ident(SEQ_COLUMN))
            exprs.append(statement_seq_sql(table))

    def append_columns(self, table_name: str, frame: Any) -> int:
        """Store a columnar batch (pandas DataFrame, Arrow table or dict of equal-length lists).

        Columns are matched by name; a timestamp column may be datetime or epoch seconds. Unknown columns or
        missing required ones are an error naming them; nothing is written then.
        """
        table = TABLES.get(table_name)
        if table is None:
            raise StoreError(f"unknown table {table_name!r}; tables: {', '.join(sorted(TABLES))}")
        with self._lock:
            if isinstance(frame, Mapping):
                return self._append_mapping(table, frame)
            return self._append_frame(table, frame)

    def _append_frame(self, table: Table, frame: Any) -> int:
        self._con.register(_BATCH_VIEW, frame)
        try:
            rel = self._con.sql(f"SELECT * FROM {_BATCH_VIEW}")
            given = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
            self._check_columns(table, given)
            exprs = []
            for name, sql_type in given.items():
                column = next(c for c in table.columns if c.name == name)
                quoted = quote_ident(name)
                numeric = sql_type.upper() in {"DOUBLE", "FLOAT", "BIGINT", "INTEGER", "HUGEINT", "UBIGINT"}
                exprs.append(_epoch_to_timestamp(quoted) if column.is_timestamp and numeric else quoted)
            names = [quote_ident(n) for n in given]
            self._statement_seq(table.name, names, exprs)
            sql = (
                f"INSERT INTO {table.name} ({', '.join(names)}) SELECT {', '.join(exprs)} FROM {_BATCH_VIEW}"
            )
            with self._transaction():
                self._con.execute(sql)
            return len(rel)
        finally:
            # Must not replace the error that brought us here.
            with contextlib.suppress(duckdb.Error):
                self._con.unregister(_BATCH_VIEW)

    def _append_mapping(self, table: Table, frame: Mapping[str, Sequence[Any]]) -> int:
        self._check_columns(table, dict.fromkeys(frame, ""))
        lengths = {len(v) for v in frame.values()}
        if len(lengths) > 1:
            raise StoreError(f"{table.name}: columns have different lengths {sorted(lengths)}")
        names = list(frame)
        exprs = []
        for i, name in enumerate(names, start=1):
            column = next(c for c in table.columns if c.name == name)
            exprs.append(_epoch_to_timestamp(f"unnest(${i})") if column.is_timestamp else f"unnest(${i})")
        with self._transaction():
            self._con.execute(
                f"INSERT INTO {table.name} ({', '.join(map(quote_ident, names))}) SELECT {', '.join(exprs)}",
                [list(frame[n]) for n in names],
            )
        return lengths.pop() if lengths else 0

    @staticmethod
    def _check_columns(table: Table, given: Mapping[str, str]) -> None:
        known = set(table.column_names)
        unknown = sorted(set(given) - known)
        missing = sorted(c.name for c in table.columns if c.required and c.name not in given)
        if unknown or missing:
            parts = []
            if unknown:
                parts.append(f"unknown columns {unknown}")
            if missing:
                parts.append(f"missing required columns {missing}")
            raise StoreError(f"{table.name}: " + "; ".join(parts))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection inside BEGIN ... COMMIT (ROLLBACK on any error), with the store's lock held: for a
        writer whose rows and bookkeeping must commit together (the controller's ingest ledger)."""
        with self._lock, self._transaction():
            yield self._con

    def _transaction(self) -> _Transaction:
        if self.read_only:
            raise StoreError(f"store {self.path} is open read-only")
        return _Transaction(self._con)

    # ---- maintenance ----------------------------------------------------------------------------------

    def apply_retention(self, days: float, *, now: float) -> dict[str, int]:
        """Delete rows older than `days` days before `now` from every table; return rows deleted per table.
        `now` is the caller's clock, never this module's: a daemon on another clock (a test's) must not
        delete the rows it just stored."""
        if days <= 0:
            raise StoreError(f"retention must be a positive number of days, got {days}")
        cutoff = now - days * 86400.0
        deleted: dict[str, int] = {}
        with self._lock, self._transaction():
            for table in TABLES.values():
                row = self._con.execute(
                    f"DELETE FROM {table.name} WHERE ts < {_epoch_to_timestamp('?')}", [cutoff]
                ).fetchall()
                deleted[table.name] = int(row[0][0]) if row else 0
        return deleted

    def counts(self) -> dict[str, int]:
        """Rows per table; 0 for a table that a store of an older schema version does not have yet."""
        with self._lock:
            existing = self._existing_tables()
            out = {}
            for name in TABLES:
                row = self._con.execute(f"SELECT count(*) FROM {name}").fetchall() if name in existing else []
                out[name] = int(row[0][0]) if row else 0
            return out

    def _existing_tables(self) -> set[str]:
        return {r[0] for r in self._con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}

    def export_parquet(self, out_dir: str | Path, tables: Iterable[str] | None = None) -> dict[str, int]:
        """Write every table (or `tables`) to Parquet in the layout of fleetguard/store/export.py: the
        telemetry tables `OUT/<table>/dt=YYYY-MM-DD/host=H/*.parquet`, the others (incidents, alerts ...)
        `OUT/<table>/<table>.parquet`; rows per table.

        A table's directory is replaced whole, so a repeated export never duplicates rows. A store of an older
        schema version opened read-only has not been upgraded and lacks the newer tables: those are skipped,
        with a warning that says how to upgrade it.
        """
        from fleetguard.store.export import exportable_tables, write_layout

        with self._lock:
            existing = exportable_tables(self._con)
            names = list(tables) if tables is not None else sorted({*existing, *TABLES})
            unknown = [name for name in names if name not in TABLES and name not in existing]
            if tables is not None and unknown:
                raise StoreError(f"unknown table {unknown[0]!r}")
            missing = [name for name in TABLES if name in names and name not in existing]
            if missing:
                log.warning(
                    "store %s has schema version %d (this fleetguard writes %d) and no table %s yet: not "
                    "exported; open it for writing once (`fleetguard agent` or `fleetguard up`) to upgrade "
                    "it",
                    self.path,
                    schema_version(self._con),
                    CURRENT_VERSION,
                    ", ".join(missing),
                )
            return write_layout(self._con, Path(out_dir), [n for n in names if n in existing])


def _unfit(column: Column, values: Sequence[Any]) -> dict[int, str]:
    """Index -> reason for the values of `column` it cannot hold (integer and timestamp columns; DuckDB
    converts the rest as it always did)."""
    if column.is_timestamp:
        return {} if timestamps_ok(values) else bad_timestamps(column, values)
    sql_type = integer_type(column)
    if sql_type is None or integers_ok(sql_type, values):
        return {}
    return bad_integers(column, sql_type, values)


class _Transaction:
    """BEGIN ... COMMIT, or ROLLBACK on any error, so the connection is usable again whatever happened.

    Views registered inside are dropped once the transaction has ended: within an aborted transaction even
    `unregister` fails, and its error would replace the one that aborted the transaction.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._views: list[str] = []

    def register(self, name: str, data: object) -> None:
        self._con.register(name, data)
        self._views.append(name)

    def __enter__(self) -> _Transaction:
        try:
            self._con.execute("BEGIN TRANSACTION")
        except duckdb.TransactionException:
            # A transaction was left open (a COMMIT that failed half-way): end it, or no write ever succeeds.
            self._rollback()
            self._con.execute("BEGIN TRANSACTION")
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        try:
            if exc_type is not None:
                self._rollback()
                return
            try:
                self._con.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        finally:
            for name in self._views:
                with contextlib.suppress(duckdb.Error):
                    self._con.unregister(name)

    def _rollback(self) -> None:
        # Never raises: the error being handled is the one worth reporting.
        with contextlib.suppress(duckdb.Error):
            self._con.execute("ROLLBACK")
