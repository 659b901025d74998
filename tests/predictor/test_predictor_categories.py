"""Text columns as features: an encoding fixed on the training window, unseen values handled, explanations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from fleetguard.predict.cli import predict_command, train_command
from predictor.feature_choice import categories_in_rows, category_feature_name

DAY = 86400.0


def _fleet(tmp_path: Path, extra_model: str | None = None) -> tuple[Path, Path]:
    """80 drives over 60 days; only drives of model 'weak' fail; the numeric column is pure noise."""
    rng = np.random.default_rng(0)
    rows: dict[str, list[object]] = {"device_id": [], "ts": [], "temp": [], "model": []}
    fails: dict[str, list[object]] = {"device_id": [], "ts": []}
    models = ["weak" if i % 4 == 0 else "sturdy" for i in range(80)]
    if extra_model:
        models.append(extra_model)
    for i, model in enumerate(models):
        dev = f"d{i:03d}"
        end = 60
        if model == "weak" and i % 8 == 0:
            end = int(rng.integers(20, 60))
            fails["device_id"].append(dev)
            fails["ts"].append(end * DAY + 3600.0)
        for day in range(end):
            rows["device_id"].append(dev)
            rows["ts"].append(day * DAY + 3600.0)
            rows["temp"].append(float(rng.normal(40, 2)))
            rows["model"].append(model)
    samples, failures = tmp_path / "samples.parquet", tmp_path / "failures.parquet"
    pq.write_table(pa.table(rows), samples)
    pq.write_table(pa.table(fails), failures)
    return samples, failures


def test_a_category_that_predicts_failure_is_learnt_and_explained_and_unseen_ones_score(
    tmp_path: Path,
) -> None:
    samples, failures = _fleet(tmp_path)
    out = tmp_path / "model"
    args = ["--samples", str(samples), "--failures", str(failures), "--horizon", "7d", "--quiet"]
    trained = CliRunner().invoke(train_command, [*args, "--model", "xgboost", "--out", str(out)])
    assert trained.exit_code == 0, trained.output
    meta = json.loads((out / "model.json").read_text())
    assert sorted(meta["feature_schema"]["categories"]["model"]) == ["sturdy", "weak"]
    assert category_feature_name("model", "weak") in meta["feature_schema"]["features"]

    (tmp_path / "new").mkdir()
    new_samples, _ = _fleet(tmp_path / "new", "brand-new")
    result = CliRunner().invoke(
        predict_command, ["--model", str(out), "--samples", str(new_samples), "--top-k", "200", "--json"]
    )
    assert result.exit_code == 0, result.output
    preds = json.loads(result.output)["predictions"]
    by_device = {p["device_id"]: p for p in preds}
    assert "d080" in by_device  # the drive of a model never seen in training is scored, not refused
    top = preds[0]
    assert int(top["device_id"][1:]) % 4 == 0  # a weak drive ranks first
    assert any(d["feature"].startswith("model==") for d in top["drivers"])


def test_the_encoding_keeps_only_values_seen_in_the_training_rows() -> None:
    names = ("temp__mean", "model==a", "model==b", "model==c")
    x = np.array([[1.0, 1, 0, 0], [2.0, 0, 1, 0], [3.0, 1, 0, 0]], dtype=np.float32)
    kept = categories_in_rows(names, (("model", ("a", "b", "c")),), x, limit=10)
    assert kept == (("model", ("a", "b")),)
    assert categories_in_rows(names, (("model", ("a", "b", "c")),), x, limit=1) == (("model", ("a",)),)
