"""`fleetguard repairs` over a real store: per fault kind, hours out of service, how often a repair held."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner

from fleetguard.cli import cli
from fleetguard.store import Store
from tests.incidents.repair_rows import write_repairs


def _store(tmp_path: Path) -> str:
    path = tmp_path / "fleet.duckdb"
    with Store.open(path) as store, store.transaction() as con:
        write_repairs(con, time.time())
    return str(path)


def test_repairs_json_gives_each_fault_kind_its_time_out_and_how_often_the_repair_held(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(cli, ["repairs", "--store", _store(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    faults = {f["fault"]: f for f in doc["faults"]}
    assert set(faults) == {"xid:79", "xid:95"}
    xid79, xid95 = faults["xid:79"], faults["xid:95"]
    assert (xid79["repairs"], xid79["resumed"], xid79["held"], xid79["not_held"]) == (2, 2, 1, 1)
    assert xid79["held_fraction"] == 0.5 and abs(xid79["out_hours"] - 6.0) < 0.01  # 2 h + 4 h
    assert (xid95["repairs"], xid95["out_now"], xid95["held_fraction"]) == (1, 1, None)
    assert 5.9 < xid95["out_hours"] < 6.1  # still out: counted until now
    assert [(n["node"], n["state"]) for n in doc["out"]] == [("node3-slurm", "selfcheck_failed")]


def test_repairs_prints_a_table_and_the_nodes_out(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["repairs", "--store", _store(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "repairs in the last 30d, per fault kind:"
    xid79 = next(line for line in lines if line.strip().startswith("xid:79"))
    assert xid79.split()[1:5] == ["2", "0", "2", "1/2"]
    assert any("node3-slurm (node3) xid:95 inc-3: selfcheck_failed" in line for line in lines)
    assert "compute gpu:0: mismatch" in result.output


def test_a_bad_since_is_one_clear_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["repairs", "--store", _store(tmp_path), "--since", "soon"])
    assert result.exit_code == 2 and "'soon' is not a duration" in result.output
    assert "Traceback" not in result.output
