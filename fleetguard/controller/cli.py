"""`fleetguard controller [token]` and `fleetguard status`: the click commands (registered lazily in
fleetguard.cli)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleetguard.config_options import load


@click.group(invoke_without_command=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.option("--store", "store_path", help="DuckDB store file (store.path).")
@click.option("--listen", help="HOST:PORT to serve on (controller.listen).")
@click.option("--duration", type=float, help="Stop after this many seconds (default: run until SIGTERM).")
@click.option("--pool", help="Also ingest this pool's batches from NATS JetStream (controller.pool).")
@click.option(
    "--dashboard-port", type=int, help="Port of the dashboard (dashboard.port, default 9481; 0 = any free)."
)
@click.pass_context
def controller_command(
    ctx: click.Context,
    config_path: str | None,
    store_path: str | None,
    listen: str | None,
    duration: float | None,
    pool: str | None,
    dashboard_port: int | None,
) -> None:
    """The fleet controller: agents ship to it (POST /v1/ingest); it is the fleet's single store writer and
    serves the read API (/v1/fleet, /v1/hosts, /v1/jobs, /v1/findings) and /metrics."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    if ctx.invoked_subcommand is not None:
        from fleetguard import stop_signals

        stop_signals.release()  # `controller token` is no daemon: Ctrl-C ends it as usual
        return
    from fleetguard.controller.process import run_controller
    from fleetguard.controller.tokens import TokenFileError
    from fleetguard.httpserve import BindError
    from fleetguard.shipping.nats_connect import NatsSettingsError
    from fleetguard.store import StoreError

    overrides = {
        "store.path": store_path,
        "controller.listen": listen,
        "controller.pool": pool,
        "dashboard.port": dashboard_port,
    }
    config = load(config_path, **overrides)
    try:
        run_controller(config, duration_seconds=duration)
    except (StoreError, TokenFileError, BindError, NatsSettingsError) as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"controller cannot start: {exc}") from exc
    from fleetguard import stop_signals

    stop_signals.exit_stopped(0)  # everything is stored and closed: skip the interpreter's teardown


@controller_command.command("token")
@click.option("--host", help="The host the token identifies (its agent.host).")
@click.option("--operator", is_flag=True, help="An operator token: read API and commands, no ingest.")
@click.option("--replace", is_flag=True, help="Revoke the host's earlier tokens.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.pass_context
def token_command(
    ctx: click.Context, host: str | None, operator: bool, replace: bool, config_path: str | None
) -> None:
    """Print a new bearer token for HOST (or an operator token); only its SHA-256 is kept, in
    controller.tokens_file (mode 0600). Put the token in the agent's controller_token_file."""
    from fleetguard.controller.tokens import OPERATOR, Role, TokenFileError, add_token

    if operator == bool(host):
        raise click.UsageError("give --host H or --operator")
    config = load(config_path or ctx.obj.get("config_path"))
    path = Path(config.controller.tokens_file)
    try:
        token = add_token(path, host or OPERATOR, Role.OPERATOR if operator else Role.AGENT, replace=replace)
    except TokenFileError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(token)
    click.echo(f"(stored its hash in {path}; this token is not shown again)", err=True)


@click.command("status")
@click.option(
    "--controller",
    "url",
    help="Controller or `up` URL (default: [agent] controller_url, else the process holding store.path).",
)
@click.option("--token-file", type=click.Path(dir_okay=False), help="Operator token (needed off loopback).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: /v1/fleet, /v1/hosts and the findings.")
@click.option("--fleet", "fleet_urls", help="Several controllers (URL1,URL2,...): one view merged from all.")
def status_command(
    url: str | None, token_file: str | None, config_path: str | None, as_json: bool, fleet_urls: str | None
) -> None:
    """The fleet at a glance: hosts by health with the reason, open incidents (the worst listed), the
    breaker, at-risk GPUs with their jobs, silent hosts, ingest lag (--json for scripts)."""
    from fleetguard.controller.status_view import StatusError, fetch_status, render_status
    from fleetguard.store.holder import read_holder

    config = load(config_path)
    # Default: the agent's controller, else the process holding this host's store (`up` or a controller,
    # at the port it bound), else controller.listen.
    holder = read_holder(config.store.path)
    local = holder.url if holder is not None and holder.url else f"http://{config.controller.listen}"
    base = url or config.agent.controller_url or local
    token_path = token_file or config.agent.controller_token_file or None
    try:
        if fleet_urls:
            from fleetguard.controller.fleet_view import fetch_fleet

            status = fetch_fleet(fleet_urls, Path(token_path) if token_path else None)
        else:
            key = "--token-file" if token_file else "agent.controller_token_file"
            status = fetch_status(base, Path(token_path) if token_path else None, key)
    except StatusError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        import json

        click.echo(json.dumps(status, indent=2))
        return
    if fleet_urls:
        from fleetguard.controller.fleet_view import render_fleet

        sys.stdout.write(render_fleet(status))
        return
    sys.stdout.write(render_status(status))
