"""Single models (XGBoost, MLP, logistic regression, random forest) behind one small interface.

Every model saves to plain arrays and JSON (never pickle) and scores with the same code before and after
a save, so a loaded model gives identical scores. Class imbalance is handled by weights (XGBoost, logistic,
forest) or by oversampling the positives (MLP, which takes no weights).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from predictor import forest_arrays

Matrix = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float64]


class Model(Protocol):
    name: str

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None: ...

    def score(self, x: Matrix) -> Scores: ...

    def save(self, directory: Path) -> dict[str, Any]: ...


@dataclass
class Standardiser:
    """Median imputation, signed log for heavy tails, then z-scores: what the non-tree models need."""

    median: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]
    scale: npt.NDArray[np.float64]

    @classmethod
    def fit(cls, x: Matrix) -> Standardiser:
        z = _signed_log(x)
        with np.errstate(all="ignore"):
            median = np.nanmedian(z, axis=0) if len(z) else np.zeros(z.shape[1])
        median = np.nan_to_num(median)
        z = np.where(np.isnan(z), median, z)
        scale = z.std(axis=0)
        return cls(median, z.mean(axis=0), np.where(scale > 1e-9, scale, 1.0))

    def apply(self, x: Matrix) -> npt.NDArray[np.float64]:
        z = _signed_log(x)
        z = np.where(np.isnan(z), self.median, z)
        return np.clip((z - self.mean) / self.scale, -10, 10)

    def arrays(self, prefix: str) -> dict[str, npt.NDArray[Any]]:
        return {f"{prefix}median": self.median, f"{prefix}mean": self.mean, f"{prefix}scale": self.scale}

    @classmethod
    def from_arrays(cls, arrays: Any, prefix: str) -> Standardiser:
        return cls(arrays[f"{prefix}median"], arrays[f"{prefix}mean"], arrays[f"{prefix}scale"])


def _signed_log(x: Matrix) -> npt.NDArray[np.float64]:
    v = np.asarray(x, dtype=np.float64)
    return np.sign(v) * np.log1p(np.abs(v))


def _save_npz(path: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Plain numeric arrays only, so loading never needs allow_pickle."""
    savez: Any = np.savez
    savez(path, **arrays)


def _sigmoid(z: npt.NDArray[np.float64]) -> Scores:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -50, 50))))


class XGBoostModel:
    name = "xgboost"

    def __init__(self, n_estimators: int = 150, max_depth: int = 4, n_jobs: int = 2) -> None:
        self.params = {"n_estimators": n_estimators, "max_depth": max_depth, "n_jobs": n_jobs}
        self.booster: Any = None

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None:
        import xgboost as xgb

        pos = max(1.0, float(y.sum()))
        clf = xgb.XGBClassifier(
            n_estimators=self.params["n_estimators"],
            max_depth=self.params["max_depth"],
            learning_rate=0.08,
            subsample=0.8,
            colsample_bytree=0.8,
            min_child_weight=2.0,
            scale_pos_weight=float(len(y) - pos) / pos,
            tree_method="hist",
            n_jobs=self.params["n_jobs"],
            random_state=seed,
            verbosity=0,
        )
        clf.fit(x, y)
        self.booster = clf.get_booster()

    def score(self, x: Matrix) -> Scores:
        import xgboost as xgb

        return np.asarray(self.booster.predict(xgb.DMatrix(x)), dtype=np.float64)

    def save(self, directory: Path) -> dict[str, Any]:
        self.booster.save_model(str(directory / "xgboost.json"))
        return {"file": "xgboost.json", "params": self.params}

    @classmethod
    def load(cls, directory: Path, meta: dict[str, Any]) -> XGBoostModel:
        import xgboost as xgb

        model = cls(**meta["params"])
        model.booster = xgb.Booster()
        model.booster.load_model(str(directory / meta["file"]))
        model.booster.set_param({"nthread": meta["params"]["n_jobs"]})
        return model


class LogisticModel:
    name = "logistic"

    def __init__(self) -> None:
        self.std: Standardiser | None = None
        self.coef = np.zeros(0)
        self.intercept = 0.0

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None:
        from sklearn.linear_model import LogisticRegression

        self.std = Standardiser.fit(x)
        clf = LogisticRegression(C=0.1, class_weight="balanced", max_iter=500, random_state=seed)
        clf.fit(self.std.apply(x), y)
        self.coef = clf.coef_[0].astype(np.float64)
        self.intercept = float(clf.intercept_[0])

    def score(self, x: Matrix) -> Scores:
        assert self.std is not None
        return _sigmoid(self.std.apply(x) @ self.coef + self.intercept)

    def save(self, directory: Path) -> dict[str, Any]:
        assert self.std is not None
        arrays = self.std.arrays("std_") | {"coef": self.coef, "intercept": np.array([self.intercept])}
        _save_npz(directory / "logistic.npz", arrays)
        return {"file": "logistic.npz"}

    @classmethod
    def load(cls, directory: Path, meta: dict[str, Any]) -> LogisticModel:
        model = cls()
        with np.load(directory / meta["file"], allow_pickle=False) as a:
            model.std = Standardiser.from_arrays(a, "std_")
            model.coef = a["coef"]
            model.intercept = float(a["intercept"][0])
        return model


class MLPModel:
    name = "mlp"

    def __init__(self, hidden: tuple[int, ...] = (32, 16)) -> None:
        self.hidden = hidden
        self.std: Standardiser | None = None
        self.weights: list[npt.NDArray[np.float64]] = []
        self.biases: list[npt.NDArray[np.float64]] = []

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None:
        from sklearn.neural_network import MLPClassifier

        self.std = Standardiser.fit(x)
        z = self.std.apply(x)
        rng = np.random.default_rng(seed)
        pos = np.flatnonzero(y > 0)
        neg = np.flatnonzero(y <= 0)
        if 0 < len(pos) < len(neg):
            # Oversample positives to a third of the negatives: MLPClassifier takes no class weights.
            extra = rng.choice(pos, size=max(0, len(neg) // 3 - len(pos)), replace=True)
            idx = np.concatenate([neg, pos, extra])
        else:
            idx = np.arange(len(y))
        clf = MLPClassifier(
            hidden_layer_sizes=self.hidden, alpha=1e-3, max_iter=60, early_stopping=False, random_state=seed
        )
        with warnings.catch_warnings():
            # A capped number of epochs is deliberate (retrained every period); convergence noise is not news.
            warnings.simplefilter("ignore", category=UserWarning)
            clf.fit(z[idx], y[idx])
        self.weights = [np.asarray(w, dtype=np.float64) for w in clf.coefs_]
        self.biases = [np.asarray(b, dtype=np.float64) for b in clf.intercepts_]

    def score(self, x: Matrix) -> Scores:
        assert self.std is not None
        h = self.std.apply(x)
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
        return _sigmoid(h[:, 0])

    def save(self, directory: Path) -> dict[str, Any]:
        assert self.std is not None
        arrays = self.std.arrays("std_")
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            arrays[f"w{i}"] = w
            arrays[f"b{i}"] = b
        _save_npz(directory / "mlp.npz", arrays)
        return {"file": "mlp.npz", "layers": len(self.weights), "hidden": list(self.hidden)}

    @classmethod
    def load(cls, directory: Path, meta: dict[str, Any]) -> MLPModel:
        model = cls(tuple(meta["hidden"]))
        with np.load(directory / meta["file"], allow_pickle=False) as a:
            model.std = Standardiser.from_arrays(a, "std_")
            model.weights = [a[f"w{i}"] for i in range(meta["layers"])]
            model.biases = [a[f"b{i}"] for i in range(meta["layers"])]
        return model


class RandomForestModel:
    """Trees split on raw values: only missing values are filled (with the training median). The linear
    models' scaling would hurt here: its clip at 10 standard deviations folds every large value of a
    mostly-zero counter (SMART raw counts, ECC totals) into one."""

    name = "random_forest"

    def __init__(self, n_estimators: int = 100, max_depth: int = 10, n_jobs: int = 2) -> None:
        self.params = {"n_estimators": n_estimators, "max_depth": max_depth, "n_jobs": n_jobs}
        self.fill = np.zeros(0)
        self.forest: forest_arrays.ForestArrays | None = None

    def fit(self, x: Matrix, y: npt.NDArray[np.float64], seed: int) -> None:
        from sklearn.ensemble import RandomForestClassifier

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)  # all-NaN columns
            fill = np.nanmedian(np.asarray(x, dtype=np.float64), axis=0) if len(x) else np.zeros(x.shape[1])
        self.fill = np.nan_to_num(fill)
        clf = RandomForestClassifier(
            n_estimators=self.params["n_estimators"],
            max_depth=self.params["max_depth"],
            min_samples_leaf=3,
            max_features="sqrt",
            class_weight="balanced_subsample",
            n_jobs=self.params["n_jobs"],
            random_state=seed,
        )
        clf.fit(self._filled(x), y)
        self.forest = forest_arrays.from_sklearn(clf)

    def _filled(self, x: Matrix) -> npt.NDArray[np.float32]:
        # float32 as sklearn sees it, so thresholds compare the same before and after a save
        return np.where(np.isnan(x), self.fill, x).astype(np.float32)

    def score(self, x: Matrix) -> Scores:
        assert self.forest is not None
        return forest_arrays.predict_positive(self.forest, self._filled(x).astype(np.float64))

    def save(self, directory: Path) -> dict[str, Any]:
        assert self.forest is not None
        _save_npz(directory / "random_forest.npz", {"fill": self.fill} | self.forest.arrays())
        return {"file": "random_forest.npz", "params": self.params}

    @classmethod
    def load(cls, directory: Path, meta: dict[str, Any]) -> RandomForestModel:
        model = cls(**meta["params"])
        with np.load(directory / meta["file"], allow_pickle=False) as a:
            model.fill = a["fill"]
            model.forest = forest_arrays.ForestArrays.from_arrays(a)
        return model
