"""`fleetguard breaker` and `fleetguard alerts` on a real store: directly when it is free, by a request
file beside it when another process holds it (DuckDB allows one writer)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from diagnosis.rules import Signals
from fleetguard.cli import cli
from fleetguard.incidents.incident_store import breaker_document
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from fleetguard.store.operator_requests import Request, request_path
from tests.diagnosis.records import T0, xid


def tripped_store(path: Path) -> None:
    hook = WebhookConfig("ops", "http://127.0.0.1:9/x", WebhookKind.SLACK)
    with Store.open(path) as store:
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2}})
        service = IncidentService.open(store.cursor(), policy, T0, webhooks=[hook])
        service.round(Signals(events=[xid(79, T0, host=f"n{i}") for i in range(4)]), T0)
        store.connection.execute("UPDATE alert_outbox SET status = 'dead'")


def test_breaker_status_and_reset_on_a_free_store(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    tripped_store(path)
    runner = CliRunner()
    status = runner.invoke(cli, ["breaker", "status", "--store", str(path)])
    assert status.exit_code == 0 and status.output.startswith("OPEN since")
    assert "hosts acted on within 300 s" in status.output
    # The round that tripped it weighed 2 hosts acted on of the 4 heard; a third opened it.
    assert "acted on 2 of 4 hosts in the last 300 s; it opens at 3" in status.output
    assert "2 repairs in the last hour of 3 allowed" in status.output
    reset = runner.invoke(cli, ["breaker", "reset", "--store", str(path)])
    assert reset.exit_code == 0 and "breaker closed" in reset.output
    after = runner.invoke(cli, ["breaker", "status", "--store", str(path)]).output
    assert after.startswith("closed")
    # The reset starts the window afresh; the command ran years after the store's rounds: the hour is empty.
    # The fleet and its threshold are the last round's (the command heard no host itself).
    assert "acted on 0 of 4 hosts in the last 300 s; it opens at 3" in after
    assert "0 repairs in the last hour of 3 allowed" in after


def test_the_headroom_and_the_trip_are_stored_without_overwriting_each_other(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 0.5, "min_hosts": 2}})
        service = IncidentService.open(store.cursor(), policy, T0)
        service.round(Signals(events=[xid(43, T0, host=f"n{i}") for i in range(6)]), T0)
        doc = breaker_document(store.cursor())
        room = doc["headroom"]
        assert doc["tripped"] is False and isinstance(room, dict)
        assert (room["fleet_hosts"], room["hosts_acted"], room["trips_at_hosts"]) == (6, 0, 4)
        # Four hosts lose a GPU: three repairs (3 of 6 is not more than half), the fourth opens it.
        service.round(Signals(events=[xid(79, T0 + 1, host=f"n{i}") for i in range(4)]), T0 + 1)
        doc = breaker_document(store.cursor())
        room = doc["headroom"]
        assert doc["tripped"] is True and "4 of 6 hosts" in str(doc["reason"]) and isinstance(room, dict)
        assert (room["hosts_acted"], room["repairs_last_hour"], room["as_of_ts"]) == (3, 3, T0 + 1)


def test_a_reset_that_processes_the_backlog_on_a_free_store_carries_out_the_held_repairs(
    tmp_path: Path,
) -> None:
    """No process holds the store, so the command itself is the executor: the repairs the breaker held run
    (a real process per host) and the ledger says how they ended, instead of staying requested forever."""
    path = tmp_path / "s.duckdb"
    tripped_store(path)
    done = tmp_path / "rebooted"
    done.mkdir()
    code = "import pathlib, sys; (pathlib.Path(sys.argv[1]) / sys.argv[2]).touch()"
    config = tmp_path / "fleetguard.toml"
    command = f"[{sys.executable!r}, '-c', {code!r}, {str(done)!r}, '{{host}}']"
    config.write_text(
        f"[diagnosis]\nreboot_node_command = {command}\n"
        "[policy.breaker]\nmax_host_fraction = 0.5\nmin_hosts = 2\n"
    )
    with Store.open(path) as store:
        held = store.connection.execute(
            "SELECT host FROM incident_actions WHERE outcome = 'held' ORDER BY host"
        ).fetchall()
    assert held  # the breaker held some reboots back
    args = ["breaker", "reset", "--config", str(config), "--store", str(path), "--process-backlog"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and "held repairs requested" in result.output, result.output
    assert sorted(p.name for p in done.iterdir()) == [h for (h,) in held]
    with Store.open(path) as store:
        ended = store.connection.execute(
            "SELECT host, outcome FROM incident_actions WHERE host IN (SELECT unnest(?)) "
            "AND outcome <> 'held' ORDER BY host",
            [[h for (h,) in held]],
        ).fetchall()
    assert ended == [(h, "succeeded") for (h,) in held]


def test_alerts_replay_and_status_on_a_free_store(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    tripped_store(path)
    runner = CliRunner()
    before = runner.invoke(cli, ["alerts", "status", "--store", str(path)])
    assert "dead" in before.output
    replayed = runner.invoke(cli, ["alerts", "replay", "--store", str(path)])
    assert replayed.exit_code == 0 and replayed.output.startswith("5 alerts queued again")
    assert "pending" in runner.invoke(cli, ["alerts", "status", "--store", str(path)]).output


def test_a_held_store_gets_a_request_file_instead(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    tripped_store(path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from fleetguard.store import Store; s = Store.open({str(path)!r}); "
            "print('held', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = CliRunner().invoke(cli, ["breaker", "reset", "--store", str(path), "--process-backlog"])
        assert result.exit_code == 0 and "within a round" in result.output
        assert request_path(str(path), Request.BREAKER_RESET).exists()
    finally:
        holder.communicate("\n", timeout=30)


def test_changing_commands_on_a_mistyped_store_refuse_instead_of_creating_one(tmp_path: Path) -> None:
    typo = tmp_path / "no-such-dir" / "stroe.duckdb"
    for args in (["breaker", "reset"], ["alerts", "replay"]):
        result = CliRunner().invoke(cli, [*args, "--store", str(typo)])
        assert result.exit_code == 1, (args, result.output)
        assert result.output.strip().splitlines() == [
            f"Error: no store at {typo}: run `fleetguard up` or `fleetguard agent` first"
        ]
    assert not typo.parent.exists()  # not even its folder is left behind
