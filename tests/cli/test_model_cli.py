"""`fleetguard model` on a store file nothing runs on: tables and JSON, promote and rollback audited with who
ran them; on a store a running process holds, the change is left beside it for that process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from fleetguard.predict.model_cli import model_group
from fleetguard.store import Store
from fleetguard.store import model_registry as reg
from fleetguard.store.operator_requests import Request, request_path, take


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.duckdb"
    with Store.open(path) as store:
        for i, t in enumerate((1_790_000_000.0, 1_790_086_400.0), start=1):
            figures = {
                "candidate": {"predictions": 10, "hits": 4 + i, "precision": (4 + i) / 10},
                "current": {"predictions": 10, "hits": 4, "precision": 0.4},
                "verdict": "promote",
                "reason": "not worse",
            }
            record = reg.ModelRecord(
                f"xgboost-{i}", t, t - 7 * 86400, t - 86400, reg.ModelState.CANDIDATE, figures
            )
            reg.add_model(store.connection, record, "retrain gate")
            reg.promote(store.connection, f"xgboost-{i}", "retrain gate", t + 1)
    return path


def test_list_and_show_print_tables_and_json(tmp_path: Path) -> None:
    store = ["--store", str(_store(tmp_path))]
    runner = CliRunner()
    table = runner.invoke(model_group, ["list", *store])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0] == "serving: xgboost-2" and lines[1].startswith("MODEL")
    assert "xgboost-2  active" in lines[2] and "0.600 vs 0.400" in lines[2] and "retired" in lines[3]
    doc = json.loads(runner.invoke(model_group, ["list", *store, "--json"]).output)
    assert [m["state"] for m in doc["models"]] == ["active", "retired"]
    shown = runner.invoke(model_group, ["show", "xgboost-1", *store])
    assert "gate       promote: not worse" in shown.output and "retired" in shown.output


def test_rollback_and_promote_on_the_store_are_logged_with_the_user(tmp_path: Path) -> None:
    path = _store(tmp_path)
    store = ["--store", str(path)]
    runner = CliRunner()
    rolled = runner.invoke(model_group, ["rollback", *store])
    assert rolled.exit_code == 0 and "xgboost-1 serves" in rolled.output, rolled.output
    again = runner.invoke(model_group, ["rollback", *store])
    assert again.exit_code == 0 and "(model_dir)" in again.output
    refused = runner.invoke(model_group, ["rollback", *store])
    assert refused.exit_code == 1 and "already serves" in refused.output
    promoted = runner.invoke(model_group, ["promote", "xgboost-2", *store, "--json"])
    assert json.loads(promoted.output)["active"] == "xgboost-2"
    with Store.open(path, read_only=True) as s:
        log = reg.history(s.connection, "xgboost-2")
    assert log[0].action is reg.LogAction.PROMOTED and "fleetguard model, on the store" in log[0].actor


def test_unknown_and_unsafe_ids_are_refused_in_one_line(tmp_path: Path) -> None:
    store = ["--store", str(_store(tmp_path))]
    runner = CliRunner()
    missing = runner.invoke(model_group, ["promote", "nope", *store])
    assert missing.exit_code == 1 and "no model nope" in missing.output and "Traceback" not in missing.output
    unsafe = runner.invoke(model_group, ["show", "../etc", *store])
    assert unsafe.exit_code == 2 and "not a model id" in unsafe.output


def test_a_change_to_a_store_in_use_is_left_for_the_running_process(tmp_path: Path) -> None:
    path = _store(tmp_path)
    holder = subprocess.Popen(  # a running process's write lock
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
        runner = CliRunner()
        left = runner.invoke(model_group, ["promote", "xgboost-1", "--store", str(path)])
        assert left.exit_code == 0 and "carries this out" in left.output, left.output
        read = runner.invoke(model_group, ["list", "--store", str(path)])
        assert read.exit_code == 1 and "--url" in read.output, read.output
    finally:
        holder.communicate("\n", timeout=30)
    assert request_path(str(path), Request.MODEL_OPS).exists()
    pending = take(str(path), Request.MODEL_OPS)
    assert pending is not None and pending["ops"][0]["op"] == "promote"
    assert pending["ops"][0]["model_id"] == "xgboost-1"
