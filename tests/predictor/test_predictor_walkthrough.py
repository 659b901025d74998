"""The README's predictor walk-through, run as written (with a smaller fleet): simulated history to a
backtest report, a trained model and predictions with their drivers."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from fleetguard.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _walkthrough() -> list[list[str]]:
    text = README.read_text()
    section = text[text.index("## Failure prediction") :]
    block = section[section.index("```sh") + len("```sh") : section.index("```", section.index("```sh") + 5)]
    commands = [shlex.split(c) for c in block.replace("\\\n", " ").strip().splitlines()]
    assert [c[:2] for c in commands] == [
        ["fleetguard", "simulate-history"],
        ["fleetguard", "evaluate"],
        ["fleetguard", "train"],
        ["fleetguard", "predict"],
    ]
    return commands


def test_the_readme_walks_from_simulated_history_to_predictions(tmp_path: Path) -> None:
    runner = CliRunner()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        outputs = []
        for argv in _walkthrough():
            args = argv[1:]
            if args[0] == "simulate-history":  # a smaller fleet: the same steps in seconds
                args[args.index("--gpus") + 1] = "48"
                args[args.index("--days") + 1] = "30"
            if args[0] == "predict":
                args.append("--json")
            result = runner.invoke(cli, args)
            assert result.exit_code == 0, (args, result.output)
            outputs.append(result.output)
    finally:
        os.chdir(cwd)
    assert pq.read_table(tmp_path / "fleet-history" / "truth.parquet").num_rows > 0
    assert "| cascade |" in outputs[1] and "using --horizon" in outputs[1]
    assert (tmp_path / "backtest.html").read_text().startswith("<!doctype html>")
    assert (tmp_path / "models" / "gpu" / "model.json").is_file()
    preds = json.loads(outputs[3])["predictions"]
    assert len(preds) == 10 and all("drivers" in p for p in preds)
    assert any(p["drivers"] for p in preds)
