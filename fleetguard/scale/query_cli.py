"""`fleetguard query SQL --lake DIR` (registered lazily in fleetguard.cli)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import click


@click.command("query")
@click.argument("sql")
@click.option(
    "--lake",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory holding each controller's Parquet export: DIR/<controller>/<table>/...",
)
@click.option("--max-rows", type=click.IntRange(1, 10_000_000), default=10_000, show_default=True)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
def query_command(sql: str, lake: str, max_rows: int, fmt: str) -> None:
    """Query every controller's Parquet export together with DuckDB (one view per table, plus a
    `controller` column)."""
    from fleetguard.scale.lake import LakeError, render_table, run_query

    try:
        result = run_query(Path(lake), sql, max_rows)
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
