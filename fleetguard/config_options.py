"""The options every command that reads the configuration shares, and loading it as a click error.

Apart from the `fleetguard` group itself (fleetguard.cli) so that each package's own subcommands
(`fleetguard alerts`, `breaker`, `controller`) can use them without importing the command line that lazily
loads them.
"""

from __future__ import annotations

from typing import Any

import click

from fleetguard.config import Config, ConfigError, check_agent_host, load_config


def config_options(fn: Any) -> Any:
    fn = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        help="TOML config file (FLEETGUARD_<SECTION>_<KEY> variables override it).",
    )(fn)
    fn = click.option("--store", "store_path", help="DuckDB store file (store.path).")(fn)
    return fn


def load(config_path: str | None, **overrides: Any) -> Config:
    """Load the config or exit non-zero with the key and the reason."""
    try:
        return load_config(config_path, overrides={k: v for k, v in overrides.items() if v is not None})
    except ConfigError as exc:
        raise click.ClickException(f"invalid configuration: {exc}") from exc


def agent_host(config: Config) -> str:
    """The name this host's agent goes by, or exit non-zero saying why no host may take it."""
    try:
        return check_agent_host(config)
    except ConfigError as exc:
        raise click.ClickException(f"invalid configuration: {exc}") from exc
