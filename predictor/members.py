"""The single models, each ensemble's members: their names, how to make one, and how to save and load one.

Below predictor.ensembles (which builds from these) and predictor.registry (which adds the ensembles), so
neither has to import the other lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from predictor.models import LogisticModel, MLPModel, Model, RandomForestModel, XGBoostModel

SINGLE_MODELS = ("xgboost", "mlp", "logistic", "random_forest")
PARALLEL_MEMBERS = ("xgboost", "random_forest", "logistic")


def make_single(name: str, n_jobs: int = 2) -> Model:
    if name == "xgboost":
        return XGBoostModel(n_jobs=n_jobs)
    if name == "logistic":
        return LogisticModel()
    if name == "mlp":
        return MLPModel()
    if name == "random_forest":
        return RandomForestModel(n_jobs=n_jobs)
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(SINGLE_MODELS)}")


def save(model: Model, directory: Path) -> dict[str, Any]:
    """Write any model's arrays/JSON under `directory` (an ensemble through its members); returns its metadata
    (never pickle)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {"name": model.name} | model.save(directory)


def load_single(directory: Path, meta: dict[str, Any]) -> Model:
    loaders: dict[str, Any] = {
        "xgboost": XGBoostModel.load,
        "logistic": LogisticModel.load,
        "mlp": MLPModel.load,
        "random_forest": RandomForestModel.load,
    }
    if meta.get("name") not in loaders:
        raise ValueError(f"{directory}: unknown model kind {meta.get('name')!r}")
    model: Model = loaders[meta["name"]](directory, meta)
    return model
