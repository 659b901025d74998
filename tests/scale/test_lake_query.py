"""`fleetguard query SQL --lake DIR` over two controllers' real Parquet exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetguard.cli import cli
from fleetguard.store import Store
from tests.controller.helpers import batch, start_test_controller

pytestmark = pytest.mark.integration


def _lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    for name, hosts, rounds in (("red", ("r1", "r2"), 3), ("blue", ("b1",), 5)):
        (tmp_path / name).mkdir()
        controller = start_test_controller(tmp_path / name, hosts)
        try:
            for host in hosts:
                for seq in range(1, rounds + 1):
                    assert controller.ship(batch(host, seq, ts=1.79e9 + seq)).status == 200
        finally:
            controller.running.stop()
        with Store.open(tmp_path / name / "controller.duckdb", read_only=True) as store:
            store.export_parquet(lake / name)
    return lake


def test_query_reads_every_controllers_export_with_a_controller_column(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    sql = "SELECT controller, host, count(*) AS n FROM gpu_samples GROUP BY ALL ORDER BY host"
    result = CliRunner().invoke(cli, ["query", sql, "--lake", str(lake), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    # 2 GPUs a batch: red's hosts shipped 3 batches each, blue's 5.
    assert rows == [
        {"controller": "blue", "host": "b1", "n": 10},
        {"controller": "red", "host": "r1", "n": 6},
        {"controller": "red", "host": "r2", "n": 6},
    ]
    table = CliRunner().invoke(
        cli, ["query", "SELECT count(DISTINCT controller) AS c FROM nic_counters", "--lake", str(lake)]
    )
    assert table.exit_code == 0, table.output
    assert table.output.split() == ["c", "2"]


def test_bad_sql_and_an_empty_lake_are_one_line_errors(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    bad = CliRunner().invoke(cli, ["query", "SELECT nope FROM gpu_samples", "--lake", str(lake)])
    assert bad.exit_code != 0
    assert bad.output.startswith("Error: ") and bad.output.count("\n") == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    none = CliRunner().invoke(cli, ["query", "SELECT 1", "--lake", str(empty)])
    assert none.exit_code != 0 and "no exported table" in none.output
