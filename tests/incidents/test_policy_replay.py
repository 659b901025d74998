"""`fleetguard policy replay` over a simulated month in a real store, with two policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnosis.replay import replay
from fleetguard.cli import cli
from fleetguard.incidents.replay_source import history_rounds, history_span
from fleetguard.incidents.simulated_history import history
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store

STRICT = """
[counters.symbol_error]            # only page on a truly bad cable
warn_rate_per_second = 1000
critical_rate_per_second = 5000
[xid.79]
action = "drain"
"""


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A month of 12 hosts, written once for the module's tests (the store is only read)."""
    path = tmp_path_factory.mktemp("month") / "month.duckdb"
    with Store.open(path) as store:
        for day in history(hosts=12, days=30, sample_seconds=4 * 3600.0, seed=7):
            store.append(day)
    return path


def test_replay_of_a_month_compares_two_policies(tmp_path: Path, month: Path) -> None:
    store_path = month
    other = tmp_path / "strict.toml"
    other.write_text(STRICT)
    result = CliRunner().invoke(
        cli,
        ["policy", "replay", "--store", str(store_path), "--since", "30d", "--policy", str(other), "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    current, strict = report["policy"], report["other_policy"]
    assert current["incidents_by_fault"].get("nic:symbol_error", 0) > 0
    assert "nic:symbol_error" not in strict["incidents_by_fault"]
    only_current = report["difference"]["incidents_only_with_a"]
    assert only_current and all(key.endswith("|nic:symbol_error") for key in only_current)
    assert report["difference"]["incidents_only_with_b"] == []
    # The storm of XID 95 lines in the month is one incident per GPU, not hundreds.
    assert current["incidents_by_fault"].get("xid:95", 0) < 20
    assert current["alerts"] and current["actions"]


def test_replay_reads_the_same_history_the_engine_would_have_seen(month: Path) -> None:
    store_path = month
    with Store.open(store_path, read_only=True) as store:
        span = history_span(store.connection)
        assert span is not None
        events = store.connection.execute("SELECT sum(count) FROM events").fetchall()[0][0]
        report = replay(
            load_policy(), history_rounds(store.connection, span[0], span[1] + 60, 60.0), span[1] + 60
        )
    counted = sum(i.occurrences for i in report.incidents.values() if i.key.fault.startswith("xid:"))
    assert 0 < counted <= events  # application XIDs below their threshold never become incidents
    assert report.rounds > 0


def test_replay_of_an_empty_store_is_a_clear_error(tmp_path: Path) -> None:
    Store.open(tmp_path / "empty.duckdb").close()
    result = CliRunner().invoke(cli, ["policy", "replay", "--store", str(tmp_path / "empty.duckdb")])
    assert result.exit_code == 1 and "holds no history" in result.output


def test_the_human_summary_names_both_policies(tmp_path: Path, month: Path) -> None:
    store_path = month
    other = tmp_path / "strict.toml"
    other.write_text(STRICT)
    result = CliRunner().invoke(cli, ["policy", "replay", "--store", str(store_path), "--policy", str(other)])
    assert result.exit_code == 0, result.output
    assert "days in" in result.output and "incidents only with the current policy" in result.output
    # For a person, not a program: no dict or list reprs (--json has the structure).
    assert "{" not in result.output and "[" not in result.output, result.output
    assert "by fault" in result.output and "nic:symbol_error" in result.output
