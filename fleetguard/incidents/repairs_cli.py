"""`fleetguard repairs`: what the repair loop did and whether it held, per fault kind, from the store."""

from __future__ import annotations

import json
import time

import click
import duckdb

from fleetguard.config_options import config_options, load
from fleetguard.incidents.replay_source import parse_duration
from fleetguard.store import Store, StoreError
from fleetguard.store.repair_tables import FaultRepairs, OutNode, nodes_out, repair_summary


def render(summary: list[FaultRepairs], out: list[OutNode], since_text: str) -> str:
    if not summary:
        return f"no Slurm repairs in the last {since_text}"
    lines = [
        f"repairs in the last {since_text}, per fault kind:",
        f"  {'fault':24s} {'repairs':>7s} {'out now':>7s} {'resumed':>7s} {'held':>9s} "
        f"{'selfcheck fails':>15s} {'hours out':>9s} {'median h':>8s}",
    ]
    for s in summary:
        held = "-" if s.held_fraction is None else f"{s.held}/{s.held + s.not_held}"
        lines.append(
            f"  {s.fault[:24]:24s} {s.repairs:7d} {s.out_now:7d} {s.resumed:7d} {held:>9s} "
            f"{s.selfcheck_failures:15d} {s.out_hours:9.1f} {s.median_out_hours:8.2f}"
        )
    if out:
        lines.append("out of service now:")
        for n in out:
            lines.append(
                f"  {n.node} ({n.host}) {n.fault} {n.incident_id}: {n.state.value} for {n.out_hours:.1f} h"
                + (f": {n.detail}" if n.detail else "")
            )
    return "\n".join(lines)


@click.command("repairs")
@config_options
@click.option("--since", default="30d", show_default=True, help="Repairs drained within this long.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def repairs_command(config_path: str | None, store_path: str | None, since: str, as_json: bool) -> None:
    """Slurm repairs per fault kind: how long hosts were out of service, how often a repair held (the
    fault did not come back within the escalation window), and the nodes out now."""
    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    config = load(config_path, **{"store.path": store_path})
    now = time.time()
    try:
        with Store.open(config.store.path, read_only=True, must_exist=True) as store:
            con = store.connection
            summary = repair_summary(con, now - window, now)
            out = nodes_out(con, now)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.CatalogException:
        raise click.ClickException(
            f"{config.store.path}: no repair outcomes table (a store from before schema 14: run fleetguard "
            "once on it to migrate)"
        ) from None
    if as_json:
        doc = {
            "since_seconds": window,
            "faults": [s.as_json() for s in summary],
            "out": [n.as_json() for n in out],
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render(summary, out, since))
