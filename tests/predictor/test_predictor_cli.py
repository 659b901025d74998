"""The train / evaluate / predict commands, driven through click's CliRunner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from fleetguard.predict.cli import COMMANDS, evaluate_command, predict_command, train_command

if TYPE_CHECKING:
    from tests.predictor.conftest import History

Writer = Callable[[Path, dict[str, list[object]]], Path]


def _inputs(h: History) -> list[str]:
    return ["--samples", str(h.samples), "--failures", str(h.failures)]


def test_commands_are_exported_for_the_fleetguard_group() -> None:
    assert [c.name for c in COMMANDS] == ["train", "evaluate", "predict"]


def test_evaluate_prints_json_in_the_issues_shape_and_writes_a_report(
    small_history: History, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    args = [
        *_inputs(small_history),
        "--horizon",
        "7d",
        "--top-k",
        "5",
        "--train-window",
        "14d",
        "--retrain-every",
        "14d",
        "--period",
        "1d",
        "--models",
        "xgboost,logistic",
        "--json",
        "--report",
        str(report),
        "--quiet",
    ]
    result = CliRunner().invoke(evaluate_command, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["k"] == 5 and out["horizon"] == "7d" and out["periods"] > 0
    assert set(out["models"]) == {"xgboost_static", "xgboost", "logistic"}
    for name in ("xgboost", "logistic"):
        figures = out["models"][name]
        assert figures["brier"] is not None and figures["reliability"]
        assert set(figures["intervals"]) == {"devices", "days"} and figures["noise_verdict"]
    page = report.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "Reliability" in page and "ratio (devices)" in page and "Brier" in page


def test_train_then_predict_lists_the_riskiest_devices(small_history: History, tmp_path: Path) -> None:
    out = tmp_path / "model"
    trained = CliRunner().invoke(
        train_command, [*_inputs(small_history), "--model", "xgboost", "--out", str(out)]
    )
    assert trained.exit_code == 0, trained.output
    assert (out / "model.json").is_file()
    assert "calibration:" in trained.output and "selection: K =" in trained.output
    meta = json.loads((out / "model.json").read_text())
    assert {"calibration", "selection", "reference"} <= set(meta["risk_policy"])
    result = CliRunner().invoke(
        predict_command,
        ["--model", str(out), "--samples", str(small_history.samples), "--top-k", "3", "--json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    preds = doc["predictions"]
    assert [p["rank"] for p in preds] == [1, 2, 3]
    assert preds[0]["risk"] >= preds[1]["risk"] >= preds[2]["risk"]
    # calibrated: a probability beside the fleet's base rate, drivers measured from a typical device
    assert doc["calibrated"] and 0 < doc["base_rate"] < 1 and all(0 <= p["risk"] <= 1 for p in preds)
    assert all("reference" in d and d["value"] != d["reference"] for p in preds for d in p["drivers"])
    # each driver's value placed in the fleet scored with it
    assert all(0 < d["percentile"] <= 100 for p in preds for d in p["drivers"])
    table = CliRunner().invoke(
        predict_command, ["--model", str(out), "--samples", str(small_history.samples), "--top-k", "3"]
    )
    assert table.exit_code == 0, table.output
    assert "fleet base rate" in table.output and "of the fleet)" in table.output


def test_predict_with_a_mismatched_schema_fails_clearly(
    small_history: History, tmp_path: Path, table_writer: Writer
) -> None:
    out = tmp_path / "model"
    CliRunner().invoke(train_command, [*_inputs(small_history), "--model", "logistic", "--out", str(out)])
    other = table_writer(tmp_path / "other.parquet", {"device_id": ["a"], "ts": [1.0], "fan_rpm": [3.0]})
    result = CliRunner().invoke(predict_command, ["--model", str(out), "--samples", str(other)])
    assert result.exit_code != 0
    assert "schema mismatch" in result.output and "temperature_celsius" in result.output


def test_bad_input_exits_with_the_file_and_column_named(tmp_path: Path, table_writer: Writer) -> None:
    bad = table_writer(tmp_path / "bad.parquet", {"device_id": ["a"], "temp": [1.0]})
    result = CliRunner().invoke(evaluate_command, ["--samples", str(bad), "--quiet"])
    assert result.exit_code != 0
    assert "bad.parquet: missing column 'ts'" in result.output


def test_store_and_samples_together_are_refused(small_history: History, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        train_command,
        [*_inputs(small_history), "--store", str(tmp_path / "x.duckdb"), "--out", str(tmp_path / "m")],
    )
    assert result.exit_code != 0 and "not both" in result.output


def test_unknown_duration_is_a_usage_error(small_history: History) -> None:
    result = CliRunner().invoke(evaluate_command, [*_inputs(small_history), "--horizon", "soon"])
    assert result.exit_code == 2 and "not a duration" in result.output


def test_simulated_history_parquet_has_the_contract_columns(small_history: History) -> None:
    names = pq.read_schema(next(small_history.samples.glob("*.parquet"))).names
    assert names[:2] == ["device_id", "ts"]


def test_the_fleetguard_command_resolves_every_predictor_subcommand() -> None:
    from fleetguard.cli import cli

    for name in ("train", "evaluate", "predict"):
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert "--samples" in result.output


def test_evaluate_runs_through_the_fleetguard_command(small_history: History) -> None:
    from fleetguard.cli import cli

    args = [*_inputs(small_history), "--top-k", "3", "--train-window", "14d", "--retrain-every", "14d"]
    result = CliRunner().invoke(cli, ["evaluate", *args, "--models", "logistic", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.output)["models"]) == {"xgboost_static", "logistic"}


def test_a_bad_value_beyond_the_type_sample_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    rows = ["device_id,ts,temp"] + [f"d{i % 50},{i * 3600},{20 + i % 7}" for i in range(40_000)]
    rows.append("d1,144000001,n/a")  # past the rows DuckDB samples to choose the column's type
    samples = tmp_path / "samples.csv"
    samples.write_text("\n".join(rows) + "\n")
    failures = tmp_path / "failures.csv"
    failures.write_text("device_id,ts\nd1,100000000\n")
    result = CliRunner().invoke(
        evaluate_command,
        ["--samples", str(samples), "--failures", str(failures), "--train-window", "30d", "--quiet"],
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert f"cannot read {samples}" in result.output and "n/a" in result.output


@pytest.mark.parametrize("damage", ["drop_schema", "escape_dir", "delete_arrays"])
def test_a_damaged_model_directory_is_a_clear_error(
    small_history: History, tmp_path: Path, damage: str
) -> None:
    out = tmp_path / "model"
    CliRunner().invoke(train_command, [*_inputs(small_history), "--model", "logistic", "--out", str(out)])
    meta = json.loads((out / "model.json").read_text())
    if damage == "drop_schema":
        del meta["feature_schema"]
    elif damage == "escape_dir":
        meta["model"]["file"] = "../../etc/passwd"
    else:
        for npz in out.rglob("*.npz"):
            npz.unlink()
    (out / "model.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(
        predict_command, ["--model", str(out), "--samples", str(small_history.samples)]
    )
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert str(out) in result.output


def test_predict_lists_only_devices_still_reporting(small_history: History, tmp_path: Path) -> None:
    out = tmp_path / "model"
    CliRunner().invoke(train_command, [*_inputs(small_history), "--model", "logistic", "--out", str(out)])
    samples = pq.read_table(small_history.samples)
    ts = samples.column("ts").to_numpy()
    gone = str(samples.column("device_id")[0])  # this device stops reporting half way through the history
    keep = [
        not (d == gone and t > ts.min() + (ts.max() - ts.min()) / 2)
        for d, t in zip(samples.column("device_id").to_pylist(), ts, strict=True)
    ]
    trimmed = tmp_path / "trimmed.parquet"
    pq.write_table(samples.filter(pa.array(keep)), trimmed)
    result = CliRunner().invoke(
        predict_command, ["--model", str(out), "--samples", str(trimmed), "--top-k", "1000", "--json"]
    )
    assert result.exit_code == 0, result.output
    listed = {p["device_id"] for p in json.loads(result.output)["predictions"]}
    assert gone not in listed and len(listed) > 10


def test_evaluate_with_a_period_longer_than_the_step_spends_k_per_period(small_history: History) -> None:
    args = [*_inputs(small_history), "--top-k", "4", "--train-window", "14d", "--retrain-every", "7d"]
    result = CliRunner().invoke(
        evaluate_command, [*args, "--period", "3d", "--models", "logistic", "--json", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["period"] == "3d"
    for metrics in out["models"].values():
        assert 0 < metrics["predictions"] <= 4 * out["periods"]


def test_evaluate_derives_settings_and_says_so(small_history: History) -> None:
    result = CliRunner().invoke(evaluate_command, [*_inputs(small_history), "--models", "logistic", "--json"])
    assert result.exit_code == 0, result.output
    assert "days of daily data: using --horizon 7d --train-window" in result.output


def test_simulate_history_into_a_path_that_cannot_be_a_directory_is_one_line(tmp_path: Path) -> None:
    from fleetguard.predict.simulate_cli import simulate_history_command

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    result = CliRunner().invoke(
        simulate_history_command, [str(blocker / "out"), "--gpus", "10", "--days", "20"]
    )
    assert result.exit_code == 1, result.output
    assert result.exception is not None and isinstance(result.exception, SystemExit)
    assert result.output.strip().splitlines() == [
        f"Error: cannot write the history to {blocker / 'out'}: Not a directory"
    ]
