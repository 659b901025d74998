"""`fleetguard alerts status|replay|silence|unsilence`: the outbox per endpoint, dead letters sent again,
and silences that mute matching alerts at the relay."""

from __future__ import annotations

import getpass
import os
import sys
import time

import click

from fleetguard.config_options import config_options, load
from fleetguard.read_client import ask_holder, token_option
from fleetguard.store import Store, StoreError, StoreLocked


@click.group("alerts")
def alerts_group() -> None:
    """Alert webhooks: delivery status, dead letters and silences."""


@alerts_group.command("status")
@config_options
@token_option
@click.option("--json", "as_json", is_flag=True, help="Print the status document as JSON (for scripts).")
def alerts_status(
    config_path: str | None, store_path: str | None, token_file: str | None, as_json: bool
) -> None:
    """Outbox rows per endpoint and status, and the latest errors (from the running controller or `up`
    when one holds the store)."""
    from fleetguard.alerts.status_doc import alerts_status as status_doc
    from fleetguard.alerts.status_doc import render_alerts_status

    config = load(config_path, **{"store.path": store_path})
    now = time.time()
    try:
        with Store.open(config.store.path, read_only=True) as store:
            doc = status_doc(store.connection, now)
    except StoreLocked as exc:
        doc = ask_holder(exc, "/v1/alerts", token_file)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        import json

        click.echo(json.dumps(doc, indent=2))
        return
    sys.stdout.write(render_alerts_status(doc, now, [hook.name for hook in config.alerts.webhooks]))


def _operator() -> str:
    """Who is silencing: the sudo caller when run through sudo (root is everyone)."""
    return os.environ.get("SUDO_USER") or getpass.getuser()


@alerts_group.command("silence")
@config_options
@click.option(
    "--match",
    "matches",
    multiple=True,
    required=True,
    help="key=value (host, component, "
    "fault, incident_id, severity, endpoint); all must match. Repeat for more.",
)
@click.option("--for", "duration", required=True, help="How long: 30m, 2h, 1h30m, 3d (1 minute to 30 days).")
@click.option("--reason", required=True, help="Why (kept with who set it).")
def alerts_silence(
    config_path: str | None, store_path: str | None, matches: tuple[str, ...], duration: str, reason: str
) -> None:
    """Mute matching alerts at the relay (and in Alertmanager receivers) until the silence expires."""
    from fleetguard.alerts.silence_rules import parse_duration, parse_matchers
    from fleetguard.alerts.silences import add_silence
    from fleetguard.store.operator_requests import Request, append

    try:
        matchers = parse_matchers(list(matches))
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if not reason.strip():
        raise click.BadParameter("--reason: say why (it is kept with the silence)")
    config = load(config_path, **{"store.path": store_path})
    now, by = time.time(), _operator()
    try:
        store = Store.open(config.store.path, must_exist=True)
    except StoreLocked:
        op = {"op": "add", "match": [f"{k}={v}" for k, v in matchers], "seconds": seconds, "at": now}
        try:
            append(config.store.path, Request.ALERTS_SILENCE, {**op, "by": by, "reason": reason})
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo("the store is in use: the running fleetguard sets the silence within a round")
        return
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    with store:
        try:
            silence = add_silence(store.connection, matchers, by, reason, now, seconds)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"{silence.silence_id}: {silence.describe()} silenced for {duration} by {silence.created_by}")


@alerts_group.command("unsilence")
@config_options
@click.argument("silence_id")
def alerts_unsilence(config_path: str | None, store_path: str | None, silence_id: str) -> None:
    """End a silence now (its record stays)."""
    from fleetguard.alerts.silences import end_silence
    from fleetguard.store.operator_requests import Request, append

    config = load(config_path, **{"store.path": store_path})
    try:
        store = Store.open(config.store.path, must_exist=True)
    except StoreLocked:
        try:
            append(config.store.path, Request.ALERTS_SILENCE, {"op": "end", "silence_id": silence_id[:64]})
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo("the store is in use: the running fleetguard ends the silence within a round")
        return
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    with store:
        ended = end_silence(store.connection, silence_id, time.time())
    if not ended:
        raise click.ClickException(f"no active silence {silence_id[:64]!r}")
    click.echo(f"{silence_id} ended")


@alerts_group.command("replay")
@config_options
@click.option("--endpoint", help="Only this webhook (its name).")
def alerts_replay(config_path: str | None, store_path: str | None, endpoint: str | None) -> None:
    """Queue dead-lettered alerts (and those set aside by a 410) to be sent again from the start."""
    from fleetguard.alerts.outbox import requeue_dead
    from fleetguard.store.operator_requests import Request, leave

    config = load(config_path, **{"store.path": store_path})
    names = [hook.name for hook in config.alerts.webhooks]
    if endpoint is not None and endpoint not in names:
        known = ", ".join(names) if names else "none: the config has no [[alerts.webhooks]]"
        message = f"no webhook named {endpoint[:64]!r} (configured: {known})"
        raise click.BadParameter(message, param_hint="--endpoint")
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
