"""`fleetguard scan`, `fleetguard policy check|replay` and `fleetguard breaker status|reset`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from diagnosis.policy import Policy
from diagnosis.policy_load import PolicyError
from diagnosis.replay import ReplayReport, compare, replay
from fleetguard.config import Config
from fleetguard.config_options import config_options, load
from fleetguard.incidents.incident_store import breaker_document
from fleetguard.read_client import ask_holder, token_option
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store, StoreError, StoreLocked


def _policy(config: Config, path: str | None = None) -> Policy:
    try:
        if path:
            return load_policy(path)
        return load_policy(config.diagnosis.policy_file or None, config.policy.tables)
    except PolicyError as exc:
        raise click.ClickException(f"invalid policy: {exc}") from exc


# ---- scan -------------------------------------------------------------------------------------------------

EX_USAGE = 64  # sysexits.h: a health checker must not read a typo as "critical" (2)


class HealthCheckUsageError(click.UsageError):
    exit_code = EX_USAGE


class HealthCheckCommand(click.Command):
    """A command whose exit codes are a health check's: a usage error exits 64, never 2 (critical)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise HealthCheckUsageError(exc.format_message(), exc.ctx) from exc


@click.command("scan", cls=HealthCheckCommand)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--kmsg-file", type=click.Path(dir_okay=False, exists=True), help="A saved kernel log to read.")
@click.option("--sysfs-root", help="Root of the sysfs tree for InfiniBand ports (default /sys).")
@click.option("--no-nvml", is_flag=True, help="Do not query NVML.")
@click.option(
    "--interval", type=click.FloatRange(0, 300), default=0.0, help="Read counters twice, this apart."
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
def scan_command(
    as_json: bool,
    kmsg_file: str | None,
    sysfs_root: str | None,
    no_nvml: bool,
    interval: float,
    config_path: str | None,
) -> None:
    """This host through the diagnosis policy: exit 0 healthy, 1 warning, 2 critical, 3 unknown (a required
    source such as the NVIDIA driver or the kernel log could not be read; --no-nvml on hosts without GPUs),
    64 usage error. Fit for Slurm's HealthCheckProgram and prolog/epilog."""
    from fleetguard.incidents.scan import ScanStatus, render, scan

    overrides: dict[str, Any] = {"collectors.sysfs_root": sysfs_root, "collectors.kmsg_state_path": ""}
    if no_nvml:
        overrides["collectors.nvml"] = False
    try:
        config = load(config_path, **overrides)
        policy = _policy(config)
        report = scan(config, policy, kmsg_file=kmsg_file, interval_seconds=interval)
    except click.ClickException as exc:
        click.echo(f"UNKNOWN: {exc.format_message()}", err=True)
        sys.exit(int(ScanStatus.UNKNOWN))
    click.echo(json.dumps(report.as_json(), indent=2, default=str) if as_json else render(report))
    sys.exit(int(report.status))


# ---- policy -----------------------------------------------------------------------------------------------


@click.group("policy")
def policy_group() -> None:
    """Check a diagnosis policy, or replay it over recorded history."""


@policy_group.command("check")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False, exists=True), help="Policy file.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
def policy_check(policy_path: str | None, config_path: str | None) -> None:
    """Load and validate the policy (the shipped one, your config's overrides, or --policy)."""
    policy = _policy(load(config_path), policy_path)
    ladder = " -> ".join(a.value for a in policy.escalation.ladder)
    click.echo(
        f"policy ok: {len(policy.xid)} XID rules, {len(policy.counters)} counter rules, "
        f"{len(policy.events)} event rules, {len(policy.findings)} finding rules, "
        f"{len(policy.cancellations)} cancellation pairs, ladder {ladder}"
    )


@policy_group.command("replay")
@config_options
@click.option("--since", default="30d", show_default=True, help="How far back from the end of the history.")
@click.option(
    "--policy", "policy_path", type=click.Path(dir_okay=False, exists=True), help="Policy to compare."
)
@click.option(
    "--step", type=click.FloatRange(1, 3600), default=60.0, show_default=True, help="Round, seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@token_option
def policy_replay(
    config_path: str | None,
    store_path: str | None,
    since: str,
    policy_path: str | None,
    step: float,
    as_json: bool,
    token_file: str | None,
) -> None:
    """What the policy would have done over recorded history (and, with --policy, what that one would have
    done instead): incidents, actions, alerts. Reads the store only."""
    from fleetguard.incidents.replay_source import history_rounds, history_span, parse_duration

    config = load(config_path, **{"store.path": store_path})
    try:
        seconds = parse_duration(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    current = _policy(config)
    other = _policy(config, policy_path) if policy_path else None
    started = time.monotonic()

    def run(con: Any) -> tuple[ReplayReport, ReplayReport | None, float, float]:
        span = history_span(con)
        if span is None:
            raise click.ClickException(f"store {config.store.path} holds no history to replay")
        begin, end = max(span[0], span[1] - seconds), span[1] + step
        a = replay(current, history_rounds(con, begin, end, step), end)
        b = replay(other, history_rounds(con, begin, end, step), end) if other else None
        return a, b, begin, end

    try:
        with Store.open(config.store.path, read_only=True) as store:
            a, b, begin, end = run(store.connection)
    except StoreLocked as exc:
        a, b, begin, end = _through_holder(exc, token_file, run)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_replay(a, b, begin, end, time.monotonic() - started, as_json)


def _through_holder(locked: StoreLocked, token_file: str | None, run: Any) -> Any:
    """Replay over a snapshot of the history the running controller or `up` holds (fetched through its read
    API into a temporary directory, read in an in-memory DuckDB): the replay's CPU is spent here, not in the
    process that ingests."""
    import tempfile
    from pathlib import Path

    import duckdb

    from fleetguard.read_client import ReadApiError, ask_holder_url, read_token
    from fleetguard.store.export import fetch_snapshot, snapshot_views

    url, who = ask_holder_url(locked)
    try:
        with tempfile.TemporaryDirectory(prefix="fleetguard-replay-") as tmp:
            fetched = fetch_snapshot(url, read_token(token_file), Path(tmp))
            con = duckdb.connect(":memory:")
            try:
                from fleetguard.store.migrations import migrate

                migrate(con)  # every table, empty: those the snapshot brings are replaced by views
                for name in fetched:
                    con.execute(f"DROP TABLE IF EXISTS {name}")
                snapshot_views(con, Path(tmp), fetched)
                return run(con)
            finally:
                con.close()
    except ReadApiError as exc:
        raise click.ClickException(f"the store is held by {who}, asked instead: {exc}") from exc


def _print_replay(
    a: ReplayReport, b: ReplayReport | None, begin: float, end: float, wall: float, as_json: bool
) -> None:
    document: dict[str, Any] = {
        "from": begin,
        "to": end,
        "wall_seconds": round(wall, 3),
        "policy": a.summary(),
    }
    if b is not None:
        document["other_policy"] = b.summary()
        document["difference"] = compare(a, b).as_json()
    if as_json:
        click.echo(json.dumps(document, indent=2))
        return
    days = (end - begin) / 86400.0
    click.echo(f"replayed {days:.1f} days in {wall:.1f} s")
    for label, summary in (("policy", a.summary()), ("--policy", b.summary() if b else None)):
        if summary is None:
            continue
        click.echo(f"{label}: {summary['incidents']} incidents ({summary['openings']} openings)")
        click.echo(f"  by fault       {_counts(summary['incidents_by_fault'])}")
        click.echo(f"  by severity    {_counts(summary['incidents_by_severity'])}")
        click.echo(f"  actions        {_counts(summary['actions'])}")
        click.echo(f"  alerts         {_counts(summary['alerts'])}")
        click.echo(f"  breaker trips  {summary['breaker_trips']}")
    if b is not None:
        diff = compare(a, b)
        click.echo(f"incidents only with the current policy: {len(diff.only_in_a)}")
        for key in diff.only_in_a[:20]:
            click.echo(f"  - {key}")
        click.echo(f"incidents only with --policy: {len(diff.only_in_b)}")
        for key in diff.only_in_b[:20]:
            click.echo(f"  + {key}")


def _counts(counts: dict[str, int]) -> str:
    """`a 3, b 1` for a person (a dict's repr is for programs: --json has those)."""
    return ", ".join(f"{key} {n}" for key, n in counts.items()) or "none"


# ---- breaker ----------------------------------------------------------------------------------------------


@click.group("breaker")
def breaker_group() -> None:
    """The repair circuit breaker: see it, reset it."""


@breaker_group.command("status")
@config_options
@token_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON: tripped, since_ts, reason.")
def breaker_status(
    config_path: str | None, store_path: str | None, token_file: str | None, as_json: bool
) -> None:
    """Whether the breaker is open, since when and why (from the running controller or `up` when one holds
    the store)."""
    config = load(config_path, **{"store.path": store_path})
    try:
        with Store.open(config.store.path, read_only=True) as store:
            doc = breaker_document(store.connection)
    except StoreLocked as exc:
        doc = ask_holder(exc, "/v1/breaker", token_file)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for line in breaker_lines(doc):
        click.echo(line)


def _utc(ts: object) -> str:
    if not isinstance(ts, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(ts))) + " UTC"


def breaker_lines(doc: Mapping[str, Any]) -> list[str]:
    """`breaker status` for a person: open or closed, and how near it and the rate limit are."""
    if doc.get("tripped"):
        lines = [
            f"OPEN since {_utc(doc.get('since_ts'))}: {doc.get('reason', '')}",
            "  repairs are held; after looking, run: fleetguard breaker reset [--process-backlog]",
        ]
    else:
        lines = ["closed: repairs go ahead"]
    room = doc.get("headroom")
    if isinstance(room, Mapping):
        lines.append(
            f"  acted on {room.get('hosts_acted')} of {room.get('fleet_hosts')} hosts in the last "
            f"{float(room.get('window_seconds') or 0):g} s; it opens at {room.get('trips_at_hosts')}"
        )
        repairs = room.get("repairs_last_hour")
        lines.append(
            f"  {repairs} repair{'' if repairs == 1 else 's'} in the last hour of "
            f"{room.get('repairs_per_hour')} allowed (as of {_utc(room.get('as_of_ts'))})"
        )
    else:
        lines.append("  no diagnosis round has weighed it yet")
    return lines


@breaker_group.command("reset")
@config_options
@click.option(
    "--process-backlog", is_flag=True, help="Carry out the repairs the breaker held (default: skip)."
)
def breaker_reset(config_path: str | None, store_path: str | None, process_backlog: bool) -> None:
    """Close the breaker. A running `fleetguard up` or controller does it within a round."""
    from fleetguard.incidents.repairs import RepairExecutor
    from fleetguard.incidents.service import IncidentService
    from fleetguard.store.operator_requests import Request, leave

    config = load(config_path, **{"store.path": store_path})
    try:
        store = Store.open(config.store.path, must_exist=True)
    except StoreLocked:
        leave(
            config.store.path, Request.BREAKER_RESET, {"process_backlog": process_backlog, "at": time.time()}
        )
        click.echo("the store is in use: the running fleetguard resets the breaker within a round")
        return
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    with store:
        service = IncidentService.open(
            store.cursor(),
            _policy(config),
            time.time(),
            executor=RepairExecutor(config.diagnosis, slurm=config.actions.slurm),
        )
        service.reset_breaker(time.time(), process_backlog)
    click.echo("breaker closed" + (" and the held repairs requested" if process_backlog else ""))
