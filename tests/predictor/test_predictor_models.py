"""Models and model directories: no pickle, identical scores after a round trip, clear schema errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from predictor import artifact
from predictor.dataset import DatasetSpec
from predictor.forest_arrays import from_sklearn, predict_positive
from predictor.registry import make as make_any


def _data(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    x[rng.random((n, 5)) < 0.05] = np.nan
    y = ((np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]) + rng.normal(0, 0.5, n)) > 1.6).astype(
        np.float64
    )
    return x, y


def _save(tmp_path: Path, name: str) -> tuple[artifact.LoadedModel, np.ndarray, np.ndarray]:
    x, y = _data()
    model = make_any(name, n_jobs=1)
    model.fit(x, y, seed=0)
    names = tuple(f"f{i}" for i in range(5))
    artifact.save(
        tmp_path / name, model, DatasetSpec(), ("temp",), (), names, (0.0, 1.0), {"train_rows": 600}
    )
    return artifact.load(tmp_path / name), model.score(x), x


@pytest.mark.parametrize("name", ["xgboost", "logistic", "mlp", "random_forest", "parallel", "cascade"])
def test_scores_are_identical_after_save_and_load(tmp_path: Path, name: str) -> None:
    loaded, before, x = _save(tmp_path, name)
    np.testing.assert_array_equal(loaded.model.score(x), before)


@pytest.mark.parametrize("name", ["xgboost", "logistic", "mlp", "random_forest"])
def test_a_model_ranks_positives_above_negatives(name: str) -> None:
    from sklearn.metrics import roc_auc_score

    x, y = _data()
    xt, yt = _data(seed=1)
    model = make_any(name, n_jobs=1)
    model.fit(x, y, seed=0)
    assert roc_auc_score(yt, model.score(xt)) > 0.8


def test_model_directories_hold_no_pickle(tmp_path: Path) -> None:
    _save(tmp_path, "cascade")
    files = [p for p in (tmp_path / "cascade").rglob("*") if p.is_file()]
    assert {p.suffix for p in files} <= {".json", ".npz"}
    for npz in (p for p in files if p.suffix == ".npz"):
        with np.load(npz, allow_pickle=False) as arrays:
            assert all(arrays[k].dtype != object for k in arrays.files)


def test_model_directory_records_schema_window_metrics_and_versions(tmp_path: Path) -> None:
    loaded, _, _ = _save(tmp_path, "xgboost")
    assert loaded.feature_columns == ("temp",)
    assert loaded.meta["training_window"] == {"start_ts": 0.0, "end_ts": 1.0}
    assert loaded.meta["metrics"] == {"train_rows": 600}
    assert "xgboost" in loaded.meta["library_versions"]


def test_scoring_data_missing_a_trained_column_fails_naming_it(tmp_path: Path) -> None:
    loaded, _, _ = _save(tmp_path, "logistic")
    with pytest.raises(artifact.ArtifactError, match=r"schema mismatch.*temp"):
        artifact.check_schema(loaded, ("power",), "new.parquet")


def test_a_directory_of_another_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text('{"format": "other", "format_version": 9}')
    with pytest.raises(artifact.ArtifactError, match="format 'other'"):
        artifact.load(tmp_path)


def test_forest_arrays_score_like_sklearn() -> None:
    from sklearn.ensemble import RandomForestClassifier

    x, y = _data()
    x = np.nan_to_num(x)
    forest = RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0).fit(x, y)
    np.testing.assert_allclose(
        predict_positive(from_sklearn(forest), x), forest.predict_proba(x)[:, 1], atol=1e-12
    )
