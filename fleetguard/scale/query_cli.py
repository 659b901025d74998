"""`fleetguard query SQL --lake DIR` (registered lazily in fleetguard.cli)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleetguard.config_options import config_options, load
from fleetguard.read_client import token_option

if TYPE_CHECKING:
    from fleetguard.scale.lake import QueryResult


@click.command("query")
@click.argument("sql")
@click.option(
    "--lake",
    type=click.Path(file_okay=False),
    help="Directory holding each controller's Parquet export: DIR/<controller>/<table>/... "
    "(default: this host's store, through the running controller or `up` when one holds it).",
)
@click.option("--max-rows", type=click.IntRange(1, 10_000_000), default=10_000, show_default=True)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
@config_options
@token_option
def query_command(
    sql: str,
    lake: str | None,
    max_rows: int,
    fmt: str,
    config_path: str | None,
    store_path: str | None,
    token_file: str | None,
) -> None:
    """Query every controller's Parquet export together with DuckDB (--lake: one view per table, plus a
    `controller` column), or this host's store (read-only; while a controller or `up` holds it, a snapshot
    of every table fetched through its read API)."""
    from fleetguard.scale.lake import LakeError, render_table, run_query

    try:
        if lake:
            result = run_query(Path(lake), sql, max_rows)
        else:
            result = _query_store(
                load(config_path, **{"store.path": store_path}).store.path, sql, max_rows, token_file
            )
    except LakeError as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(result.columns)
        writer.writerows(result.rows)
    elif fmt == "json":
        rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        click.echo(json.dumps(rows, default=str, indent=1))
    else:
        sys.stdout.write(render_table(result))


def _query_store(store_path: str, sql: str, max_rows: int, token_file: str | None) -> QueryResult:
    import tempfile

    import duckdb

    from fleetguard.read_client import ReadApiError, ask_holder_url, read_token
    from fleetguard.scale.lake import query_connection
    from fleetguard.store import Store, StoreError, StoreLocked
    from fleetguard.store.export import fetch_snapshot, snapshot_views

    try:
        with Store.open(store_path, read_only=True) as store:
            return query_connection(store.connection, sql, max_rows)
    except StoreLocked as exc:
        url, who = ask_holder_url(exc)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        with tempfile.TemporaryDirectory(prefix="fleetguard-query-") as tmp:
            fetched = fetch_snapshot(url, read_token(token_file), Path(tmp))
            con = duckdb.connect(":memory:")
            try:
                snapshot_views(con, Path(tmp), fetched)
                return query_connection(con, sql, max_rows)
            finally:
                con.close()
    except ReadApiError as exc:
        raise click.ClickException(f"the store is held by {who}, asked instead: {exc}") from exc
