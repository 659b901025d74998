"""`fleetguard selfcheck`: the tests a host passes before it takes work again; exit codes like `scan`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from fleetguard.config_options import load
from fleetguard.incidents.cli import HealthCheckCommand, _policy


def _gpus(_ctx: click.Context, _param: click.Parameter, text: str) -> str:
    if text in ("all", "none") or all(part.isdigit() and len(part) < 4 for part in text.split(",")):
        return text
    raise click.BadParameter("all, none, or GPU indices such as 0,1,2", param_hint="--gpus")


def _timeout(_ctx: click.Context, _param: click.Parameter, text: str | None) -> float | None:
    """Checked while parsing, so a bad value is a usage error (64)."""
    from fleetguard.incidents.replay_source import parse_duration

    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timeout") from exc
    if not 1 <= seconds <= 3600:
        raise click.BadParameter("between 1s and 60m", param_hint="--timeout")
    return seconds


@click.command("selfcheck", cls=HealthCheckCommand)
@click.option(
    "--gpus", default="all", show_default=True, callback=_gpus, help="all, none (no GPUs here), or 0,1,..."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--timeout", "timeout", default=None, callback=_timeout, help="Deadline for all checks, e.g. 120s, 5m."
)
@click.option("--simulate", metavar="HOSTSxGPUS", help="Check a simulated host (its first) instead.")
@click.option("--kmsg-file", type=click.Path(dir_okay=False, exists=True), help="A saved kernel log to read.")
@click.option("--sysfs-root", help="Root of the sysfs tree for InfiniBand ports (default /sys).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
def selfcheck_command(
    gpus: str,
    as_json: bool,
    timeout: float | None,
    simulate: str | None,
    kmsg_file: str | None,
    sysfs_root: str | None,
    config_path: str | None,
) -> None:
    """Health fields, a compute and memory test per GPU, an all-reduce among the host's GPUs (NCCL; gloo on
    CPU) and NIC ports steady across the tests. Exit 0 passed, 1 passed with warnings, 2 failed, 3 unknown
    (a required source could not be read, or a check could not run), 64 usage error."""
    from fleetguard.incidents.scan import ScanStatus
    from fleetguard.selfcheck.report import render
    from fleetguard.selfcheck.run import selfcheck_host

    overrides: dict[str, Any] = {"collectors.sysfs_root": sysfs_root, "simulate.fleet": simulate}
    try:
        config = load(config_path, **overrides)
        policy = _policy(config)
    except click.ClickException as exc:
        click.echo(f"UNKNOWN: {exc.format_message()}", err=True)
        sys.exit(int(ScanStatus.UNKNOWN))
    report = selfcheck_host(config, policy, gpus=gpus, kmsg_file=kmsg_file, timeout_seconds=timeout)
    click.echo(json.dumps(report.as_json(), indent=2) if as_json else render(report))
    sys.exit(int(report.status))
