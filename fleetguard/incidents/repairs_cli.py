"""`fleetguard repairs`: what the repair loop did and whether it held, per fault kind, from the store (or,
while a controller or `up` holds it, from that process's read API)."""

from __future__ import annotations

import json
import time
from typing import Any

import click
import duckdb

from fleetguard.config_options import config_options, load
from fleetguard.incidents.replay_source import parse_duration
from fleetguard.read_client import ask_holder, token_option
from fleetguard.store import Store, StoreError, StoreLocked
from fleetguard.store.repair_tables import MAX_SINCE_SECONDS, repairs_document


def render(doc: dict[str, Any], since_text: str) -> str:
    """The repairs document (repair_tables.repairs_document, the same from the file and a running process)."""
    faults, out = doc["faults"], doc["out"]
    if not faults:
        return f"no Slurm repairs in the last {since_text}"
    lines = [
        f"repairs in the last {since_text}, per fault kind:",
        f"  {'fault':24s} {'repairs':>7s} {'out now':>7s} {'resumed':>7s} {'held':>9s} "
        f"{'selfcheck fails':>15s} {'hours out':>9s} {'median h':>8s}",
    ]
    for s in faults:
        held = "-" if s["held_fraction"] is None else f"{s['held']}/{s['held'] + s['not_held']}"
        lines.append(
            f"  {str(s['fault'])[:24]:24s} {s['repairs']:7d} {s['out_now']:7d} {s['resumed']:7d} {held:>9s} "
            f"{s['selfcheck_failures']:15d} {s['out_hours']:9.1f} {s['median_out_hours']:8.2f}"
        )
    if out:
        lines.append("out of service now:")
        for n in out:
            lines.append(
                f"  {n['node']} ({n['host']}) {n['fault']} {n['incident_id']}: {n['state']} for "
                f"{n['out_hours']:.1f} h" + (f": {n['detail']}" if n["detail"] else "")
            )
    return "\n".join(lines)


@click.command("repairs")
@config_options
@token_option
@click.option("--since", default="30d", show_default=True, help="Repairs drained within this long.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def repairs_command(
    config_path: str | None, store_path: str | None, token_file: str | None, since: str, as_json: bool
) -> None:
    """Slurm repairs per fault kind: how long hosts were out of service, how often a repair held (the
    fault did not come back within the escalation window), and the nodes out now (from the running
    controller or `up` when one holds the store)."""
    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    if not 0 < window <= MAX_SINCE_SECONDS:
        raise click.BadParameter("at most 10 years", param_hint="--since")
    config = load(config_path, **{"store.path": store_path})
    try:
        with Store.open(config.store.path, read_only=True, must_exist=True) as store:
            doc = repairs_document(store.connection, window, time.time())
    except StoreLocked as exc:
        doc = ask_holder(exc, f"/v1/repairs?since_seconds={window!r}", token_file)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.CatalogException:
        raise click.ClickException(
            f"{config.store.path}: no repair outcomes table (a store from before schema 14: run fleetguard "
            "once on it to migrate)"
        ) from None
    click.echo(json.dumps(doc, indent=2) if as_json else render(doc, since))
