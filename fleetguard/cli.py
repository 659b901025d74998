"""The `fleetguard` command line. Heavy subcommands (the predictor's) load only when invoked, so the host
agent never imports pandas, scikit-learn or xgboost."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from fleetguard import __version__, stop_signals
from fleetguard.config_options import agent_host, config_options, load
from fleetguard.read_client import token_option
from fleetguard.startup import StartupError, one_line


class LazyGroup(click.Group):
    """A click group whose subcommands named in `lazy` ("module:attr") are imported on first use. `--help`
    imports none of them: their one-line help is read from the source (fleetguard.lazyhelp)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, _, attr = self.lazy[cmd_name].partition(":")
            try:
                command = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if exc.name is None or exc.name.split(".")[0] in _OUR_PACKAGES:
                    raise
                raise click.ClickException(
                    f"`fleetguard {cmd_name}` needs {exc.name}, which this install lacks: "
                    "pip install 'fleetguard[predictor]' adds the offline tools' packages"
                ) from exc
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from fleetguard.lazyhelp import short_help

        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, short_help(self.lazy[name], formatter.width - 6 - len(name))))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


_OUR_PACKAGES = frozenset({"fleetguard", "collectors", "predictor", "diagnosis", "straggler", "dashboard"})


@click.group(
    cls=LazyGroup,
    lazy={
        "controller": "fleetguard.controller.cli:controller_command",
        "status": "fleetguard.controller.cli:status_command",
        "query": "fleetguard.scale.query_cli:query_command",
        "train": "fleetguard.predict.cli:train_command",
        "evaluate": "fleetguard.predict.cli:evaluate_command",
        "predict": "fleetguard.predict.cli:predict_command",
        "model": "fleetguard.predict.model_cli:model_group",
        "simulate-history": "fleetguard.predict.simulate_cli:simulate_history_command",
        "scan": "fleetguard.incidents.cli:scan_command",
        "selfcheck": "fleetguard.selfcheck.cli:selfcheck_command",
        "policy": "fleetguard.incidents.cli:policy_group",
        "breaker": "fleetguard.incidents.cli:breaker_group",
        "repairs": "fleetguard.incidents.repairs_cli:repairs_command",
        "alerts": "fleetguard.alerts.cli:alerts_group",
    },
)
@click.version_option(__version__, prog_name="fleetguard")
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.pass_context
def cli(ctx: click.Context, log_level: str) -> None:
    """fleetguard: GPU-fleet fault diagnosis, failure prediction and training-runtime resilience."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ctx.invoked_subcommand not in DAEMONS:
        stop_signals.release()  # Ctrl-C ends any other command as Python's default does


# Commands that route SIGINT/SIGTERM to their own stop (a final flush) once started; until then a stop
# signal is held for them (fleetguard/stop_signals.py), never raised in the middle of their start-up.
DAEMONS = frozenset({"up", "agent", "controller"})


@contextlib.contextmanager
def startup_errors() -> Iterator[None]:
    """A daemon that cannot start: its one-line reason and a non-zero exit, no traceback."""
    try:
        yield
    except StartupError as exc:
        raise click.ClickException(one_line(str(exc))) from exc


def _daemon_overrides(
    store_path: str | None,
    metrics_port: int | None,
    simulate: str | None,
    no_faults: bool,
    no_nvml: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "store.path": store_path,
        "agent.metrics_port": metrics_port,
        "simulate.fleet": simulate,
    }
    if no_faults:
        out["simulate.faults"] = False
    if no_nvml:
        out["collectors.nvml"] = False
    return out


def daemon_options(fn: Any) -> Any:
    fn = config_options(fn)
    fn = click.option(
        "--simulate",
        metavar="HOSTSxGPUS",
        help="Sample a simulated fleet, e.g. 2x8, instead of this host's hardware.",
    )(fn)
    fn = click.option("--no-faults", is_flag=True, help="With --simulate: no scripted faults.")(fn)
    # The advice NVML prints when it cannot start names this flag: every command that samples accepts it.
    fn = click.option("--no-nvml", is_flag=True, help="Do not query NVML (collectors.nvml = false).")(fn)
    fn = click.option(
        "--metrics-port", type=int, help="Port of /metrics (agent.metrics_port; 0 = any free)."
    )(fn)
    fn = click.option(
        "--duration", type=float, help="Stop after this many seconds (default: run until SIGTERM)."
    )(fn)
    return fn


@cli.command()
@daemon_options
@click.option("--no-runtime", is_flag=True, help="Do not listen for training-job heartbeats.")
def agent(
    config_path: str | None,
    store_path: str | None,
    simulate: str | None,
    no_faults: bool,
    no_nvml: bool,
    metrics_port: int | None,
    duration: float | None,
    no_runtime: bool,
) -> None:
    """The host daemon: sample collectors into the store, serve /metrics and watch the training ranks on this
    host (heartbeats, stragglers, hangs, restarts) until SIGTERM."""
    from fleetguard.agent.daemon import run_daemon
    from fleetguard.agent.sources import NoSources, build_sources
    from fleetguard.httpserve import bound_where
    from fleetguard.runtime.extension import runtime_extension

    config = load(config_path, **_daemon_overrides(store_path, metrics_port, simulate, no_faults, no_nvml))
    agent_host(config)  # the name its rows, runtime findings and incidents are filed under
    try:
        sources = build_sources(config)
    except NoSources as exc:
        raise click.ClickException(str(exc)) from exc
    for message in sources.unavailable:
        click.echo(f"note: {message}", err=True)
    runtime = config.runtime.enabled and not no_runtime
    from fleetguard.jobcontrol.runtime_slot import RuntimeSlot

    runtime_slot = RuntimeSlot()

    def ready(port: int) -> None:
        # The port the runtime did bind (runtime.port may be 0: any free one), never just the configured one.
        endpoint = runtime_slot.service.endpoint if runtime_slot.service is not None else None
        ranks = f"; training ranks report to {endpoint}" if endpoint else ""
        nats = config.agent.transport == "nats"
        target = f"NATS {config.agent.nats_url}" if nats else config.agent.controller_url
        ships = f"; shipping to {target}" if shipping is not None else ""
        metrics = bound_where(config.agent.metrics_address, port, "/metrics")
        click.echo(f"fleetguard agent: /metrics at {metrics}{ranks}{ships}", err=True)

    shipping = None
    if config.agent.controller_url or config.agent.transport == "nats":
        from fleetguard.selfcheck.command import selfcheck_runner
        from fleetguard.shipping.agent_side import open_shipping
        from fleetguard.shipping.commands import CommandKind
        from fleetguard.shipping.errors import ShippingError

        try:
            # The controller's repair loop asks for a self-check before it returns a drained node.
            shipping = open_shipping(config, runtime_slot, {CommandKind.SELFCHECK: selfcheck_runner(config)})
        except ShippingError as exc:
            raise click.ClickException(str(exc)) from exc
    with startup_errors():
        run_daemon(
            config,
            sources.collectors,
            sources.folder,
            extensions=[runtime_extension(config, runtime_slot)] if runtime else [],
            duration_seconds=duration,
            on_ready=ready,
            sink=shipping,  # None: a local store at store.path
        )
    stop_signals.exit_stopped(0)  # stored (or spooled) and closed: skip the interpreter's teardown


@cli.command()
@daemon_options
@click.option("--no-runtime", is_flag=True, help="Do not listen for training-job heartbeats.")
@click.option("--no-predict", is_flag=True, help="Do not score GPU failure risk.")
@click.option(
    "--dashboard-port",
    type=int,
    help="Port of the web dashboard (dashboard.port, default 9481; 0 = any free).",
)
def up(
    config_path: str | None,
    store_path: str | None,
    simulate: str | None,
    no_faults: bool,
    no_nvml: bool,
    metrics_port: int | None,
    duration: float | None,
    no_runtime: bool,
    no_predict: bool,
    dashboard_port: int | None,
) -> None:
    """The embedded default: agent, store, training runtime, live risk scoring and the dashboard in one
    process."""
    if stop_signals.pending():  # Ctrl-C while the command line loaded: before `up`'s own imports (a second)
        click.echo("fleetguard up: stopped before it started")
        stop_signals.exit_stopped(0)
    from fleetguard.embedded import run_embedded

    overrides = _daemon_overrides(store_path, metrics_port, simulate, no_faults, no_nvml)
    config = load(config_path, **overrides, **{"dashboard.port": dashboard_port})
    agent_host(config)  # up is this host's agent: its rows, runtime findings and repairs go by this name
    with startup_errors():
        code = run_embedded(config, duration_seconds=duration, runtime=not no_runtime, predict=not no_predict)
    stop_signals.exit_stopped(code)  # everything is stored and closed: skip the interpreter's teardown


@cli.command()
@click.option("--once", is_flag=True, required=True, help="One round of every collector (the only mode).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (default: a short summary).")
@click.option("--sysfs-root", default=None, help="Root of the sysfs tree for the RDMA collector.")
@click.option(
    "--kmsg-file",
    default=None,
    type=click.Path(dir_okay=False, exists=True),
    help="Parse this kernel-log file (raw kmsg, dmesg -T or dmesg --time-format=iso) instead of /dev/kmsg.",
)
@click.option("--no-nvml", is_flag=True, help="Skip NVML.")
@click.option("--simulate", metavar="HOSTSxGPUS", help="Collect from a simulated fleet instead.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
def collect(
    once: bool,
    as_json: bool,
    sysfs_root: str | None,
    kmsg_file: str | None,
    no_nvml: bool,
    simulate: str | None,
    config_path: str | None,
) -> None:
    """Show what this host reports: one round of every collector."""
    from fleetguard.agent.sources import collect_once, render_collect

    overrides: dict[str, Any] = {"collectors.sysfs_root": sysfs_root, "simulate.fleet": simulate}
    if no_nvml:
        overrides["collectors.nvml"] = False
    config = load(config_path, **overrides)
    report = collect_once(config, kmsg_file=kmsg_file)
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    click.echo(render_collect(report))


@cli.command()
@click.option(
    "--parquet",
    "parquet_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for hive-partitioned Parquet (TABLE/dt=YYYY-MM-DD/host=H/).",
)
@config_options
@token_option
@click.option("--json", "as_json", is_flag=True, help="Print the rows written per table as JSON.")
def export(
    parquet_dir: str, config_path: str | None, store_path: str | None, token_file: str | None, as_json: bool
) -> None:
    """Export every table of the store (incidents and alerts included) to Parquet for offline training and
    ad-hoc queries; while a controller or `up` holds the store, a consistent snapshot through its read API."""
    from fleetguard.store import Store, StoreError, StoreLocked

    config = load(config_path, **{"store.path": store_path})
    try:
        store = Store.open(config.store.path, read_only=True)
    except StoreLocked as exc:
        written = _export_through(exc, Path(parquet_dir), token_file)
        store = None
    except StoreError as exc:
        raise click.ClickException(f"store.path: {one_line(str(exc))}") from exc
    except OSError as exc:
        raise click.ClickException(f"store.path {config.store.path}: {exc.strerror or exc}") from exc
    if store is not None:
        try:
            with store:
                written = store.export_parquet(Path(parquet_dir))
        except StoreError as exc:
            raise click.ClickException(one_line(str(exc))) from exc
        except OSError as exc:  # the Parquet directory cannot be made or written
            raise click.ClickException(f"--parquet {parquet_dir}: {exc.strerror or exc}") from exc
    if as_json:
        click.echo(json.dumps({"parquet": str(Path(parquet_dir).resolve()), "rows": written}, indent=2))
        return
    click.echo(f"{'TABLE':24s} {'ROWS':>10s}")
    for table, rows in written.items():
        click.echo(f"{table:24s} {rows:>10d}")
    if not written:
        click.echo("the store is empty: nothing exported")


def _export_through(locked: Exception, out: Path, token_file: str | None) -> dict[str, int]:
    """Export from the process that holds the store (its read API), as this user, into `out`."""
    import tempfile

    from fleetguard.read_client import ReadApiError, ask_holder_url, read_token
    from fleetguard.store.export import fetch_snapshot, layout_from_snapshot

    url, who = ask_holder_url(locked)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".fleetguard-fetch-", dir=out) as tmp:
            fetched = fetch_snapshot(url, read_token(token_file), Path(tmp))
            return layout_from_snapshot(Path(tmp), out, fetched)
    except ReadApiError as exc:
        raise click.ClickException(f"the store is held by {who}, asked instead: {exc}") from exc
    except OSError as exc:
        raise click.ClickException(f"--parquet {out}: {exc.strerror or exc}") from exc


def main() -> None:
    cli(prog_name="fleetguard")
