"""Silences: set from the CLI (directly, or queued while another process holds the store), they mute
matching alerts at the relay (a real loopback receiver), are listed by `alerts status`, and expire."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnosis.rules import Signals
from fleetguard.alerts.outbox import counts
from fleetguard.alerts.relay import AlertRelay
from fleetguard.alerts.silence_rules import parse_duration, parse_matchers
from fleetguard.alerts.silences import active_silences, add_silence, apply_request
from fleetguard.cli import cli
from fleetguard.clock import FakeClock
from fleetguard.incidents.service import IncidentService
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from fleetguard.store.operator_requests import Request, request_path, take
from tests.alerts.receiver import receiver
from tests.diagnosis.records import T0, xid


def test_matchers_and_durations_are_checked_with_a_clear_reason() -> None:
    assert parse_matchers(["host=n1", "fault=xid:79"]) == (("fault", "xid:79"), ("host", "n1"))
    assert parse_duration("2h") == 7200.0 and parse_duration("1h30m") == 5400.0
    for bad in (["colour=red"], ["host"], ["host="], [], ["host=a", "host=b"]):
        with pytest.raises(ValueError):
            parse_matchers(bad)
    for text in ("2 hours", "10s", "31d", "-1h", "h"):
        with pytest.raises(ValueError):
            parse_duration(text)


def test_a_silence_mutes_matching_alerts_at_the_relay_until_it_expires(store: Store) -> None:
    clock = FakeClock(T0)
    with receiver(None) as (url, got):
        hook = WebhookConfig("chat", url, WebhookKind.SLACK, rate_per_second=100)
        config = AlertsConfig(webhooks=(hook,))
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
        service = IncidentService.open(store.cursor(), policy, T0, webhooks=config.webhooks)
        relay = AlertRelay(store.cursor(), config, clock)
        add_silence(store.connection, parse_matchers(["host=n1"]), "alice", "reboots", T0, 600.0)
        service.round(Signals(events=[xid(79, T0, host=h) for h in ("n1", "n2")]), T0)
        for _ in range(5):
            relay.run_once()
            clock.advance(0.1)
        [only] = [r["body"]["text"] for r in got.requests]
        assert only.startswith(":red_circle: opened: xid:79 on n2 ")
        assert counts(store.connection) == {("chat", "silenced"): 1, ("chat", "delivered"): 1}
        assert relay.stats.silenced == {"chat": 1}
        # Expired: a new fault of n1 (another GPU) is paged.
        clock.advance(600)
        service.round(Signals(events=[xid(79, clock.time(), host="n1", pci="0000:aa:00")]), clock.time())
        for _ in range(5):
            relay.run_once()
            clock.advance(0.1)
        assert got.requests[-1]["body"]["text"].startswith(":red_circle: opened: xid:79 on n1")


def test_silence_status_and_unsilence_from_the_cli_on_a_free_store(tmp_path: Path) -> None:
    path = str(tmp_path / "s.duckdb")
    Store.open(path).close()
    runner = CliRunner()
    args = ["alerts", "silence", "--store", path, "--match", "host=n1", "--for", "2h", "--reason", "rma"]
    set_ = runner.invoke(cli, args)
    assert set_.exit_code == 0, set_.output
    silence_id = set_.output.split(":")[0]
    status = runner.invoke(cli, ["alerts", "status", "--store", path])
    assert "1 active silence(s)" in status.output and f"{silence_id}  host=n1" in status.output
    assert "rma" in status.output
    assert runner.invoke(cli, ["alerts", "unsilence", "--store", path, silence_id]).exit_code == 0
    assert "0 active silence(s)" in runner.invoke(cli, ["alerts", "status", "--store", path]).output
    again = runner.invoke(cli, ["alerts", "unsilence", "--store", path, silence_id])
    assert again.exit_code == 1 and "no active silence" in again.output
    bad = runner.invoke(cli, [*args[:-4], "--match", "colour=red", "--for", "2h", "--reason", "x"])
    assert bad.exit_code == 2 and "key one of host" in bad.output


def test_a_silence_asked_for_while_the_store_is_held_is_queued_and_taken_within_a_round(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.duckdb")
    Store.open(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from fleetguard.store import Store; s = Store.open({path!r}); "
            "print('held', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for host in ("n1", "n2"):
            args = ["alerts", "silence", "--store", path, "--match", f"host={host}", "--for", "1h"]
            result = CliRunner().invoke(cli, [*args, "--reason", "maintenance"])
            assert result.exit_code == 0 and "within a round" in result.output
        assert request_path(path, Request.ALERTS_SILENCE).exists()
    finally:
        holder.communicate("\n", timeout=30)
    payload = take(path, Request.ALERTS_SILENCE)
    assert payload is not None
    with Store.open(path) as store:
        lines = apply_request(store.connection, payload, T0 + 1)
        assert len(lines) == 2 and all("set by" in line for line in lines)
        silences = active_silences(store.connection, T0 + 1)
    # Two queued, both kept (a second request does not replace the first).
    assert sorted(s.describe() for s in silences) == ["host=n1", "host=n2"]


def test_the_resolve_of_an_incident_whose_opening_was_silenced_is_not_sent_alone(store: Store) -> None:
    clock = FakeClock(T0)
    with receiver(None) as (url, got):
        hook = WebhookConfig("chat", url, WebhookKind.SLACK, rate_per_second=100)
        config = AlertsConfig(webhooks=(hook,))
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
        service = IncidentService.open(store.cursor(), policy, T0, webhooks=config.webhooks)
        relay = AlertRelay(store.cursor(), config, clock)
        silence = add_silence(store.connection, parse_matchers(["host=n1"]), "alice", "rma", T0, 60.0)
        [change] = service.round(Signals(events=[xid(79, T0, host="n1")]), T0)
        relay.run_once()
        clock.advance(120)  # the silence is over; then the incident resolves
        service.resolve(change.incident.incident_id, clock.time())
        for _ in range(3):
            relay.run_once()
            clock.advance(0.1)
    assert got.requests == []
    assert counts(store.connection) == {("chat", "silenced"): 2}
    assert not silence.active(clock.time())


def test_a_malformed_queued_silence_is_skipped_with_its_reason_and_the_rest_still_apply(store: Store) -> None:
    ops: list[object] = [
        "not an operation",
        {"op": "add", "match": ["colour=red"], "seconds": 3600},
        {"op": "add", "match": ["host=n1"], "seconds": float("nan")},
        {
            "op": "add",
            "match": ["host=n1"],
            "seconds": 3600,
            "at": float("inf"),
            "by": "bob",
            "reason": "rma",
        },
        {"op": "end", "silence_id": "sil_nosuchthing"},
    ]
    lines = apply_request(store.connection, {"ops": ops}, T0)
    assert [line.split(":")[0] for line in lines[:3]] == ["silence request skipped"] * 3
    assert "set by bob" in lines[3] and lines[4] == "silence sil_nosuchthing was not active"
    [kept] = active_silences(store.connection, T0)
    assert kept.expires_at == T0 + 3600 and kept.reason == "rma"
