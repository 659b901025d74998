"""`fleetguard alerts status|replay`: the outbox per endpoint, and dead letters sent again."""

from __future__ import annotations

import time

import click

from fleetguard.config_options import config_options, load
from fleetguard.store import Store, StoreError, StoreLocked


@click.group("alerts")
def alerts_group() -> None:
    """Alert webhooks: delivery status and dead letters."""


@alerts_group.command("status")
@config_options
def alerts_status(config_path: str | None, store_path: str | None) -> None:
    """Outbox rows per endpoint and status, and the latest errors."""
    from fleetguard.alerts.outbox import counts

    config = load(config_path, **{"store.path": store_path})
    try:
        with Store.open(config.store.path, read_only=True) as store:
            by = counts(store.connection)
            errors = store.connection.execute(
                "SELECT endpoint, last_error FROM alert_outbox WHERE last_error <> '' "
                "ORDER BY next_attempt_at DESC LIMIT 5"
            ).fetchall()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    if not by:
        click.echo("no alerts yet")
    for (endpoint, status), n in sorted(by.items()):
        click.echo(f"{endpoint:24s} {status:10s} {n:>8d}")
    for endpoint, error in errors:
        click.echo(f"  last error {endpoint}: {error}")


@alerts_group.command("replay")
@config_options
@click.option("--endpoint", help="Only this webhook (its name).")
def alerts_replay(config_path: str | None, store_path: str | None, endpoint: str | None) -> None:
    """Queue dead-lettered alerts (and those set aside by a 410) to be sent again from the start."""
    from fleetguard.alerts.outbox import requeue_dead
    from fleetguard.store.operator_requests import Request, leave

    config = load(config_path, **{"store.path": store_path})
    try:
        store = Store.open(config.store.path, must_exist=True)
    except StoreLocked:
        leave(config.store.path, Request.ALERTS_REPLAY, {"endpoint": endpoint, "at": time.time()})
        click.echo("the store is in use: the running fleetguard queues the dead letters again within a round")
        return
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    with store:
        n = requeue_dead(store.connection, time.time(), endpoint)
    click.echo(f"{n} alerts queued again; they are sent by the running fleetguard up or controller")
