"""The one model registry: every model name, how to make one, and how to save and load any of them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictor.models import LogisticModel, MLPModel, Model, RandomForestModel, XGBoostModel

SINGLE_MODELS = ("xgboost", "mlp", "logistic", "random_forest")
ENSEMBLES = ("parallel", "cascade")
ALL_MODELS = (*SINGLE_MODELS, *ENSEMBLES)
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


def make(name: str, n_jobs: int = 2) -> Model:
    """A single model or an ensemble by name."""
    from predictor.ensembles import CascadeEnsemble, ParallelEnsemble

    if name in ("parallel", "parallel_rank"):
        return ParallelEnsemble.of(n_jobs=n_jobs)
    if name == "cascade":
        return CascadeEnsemble.of(n_jobs=n_jobs)
    return make_single(name, n_jobs)


def save(model: Model, directory: Path) -> dict[str, Any]:
    """Write the model's arrays/JSON under `directory`; returns its metadata (never pickle)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {"name": model.name} | model.save(directory)


def load(directory: Path, meta: dict[str, Any]) -> Model:
    from predictor.ensembles import CascadeEnsemble, ParallelEnsemble

    loaders: dict[str, Any] = {
        "xgboost": XGBoostModel.load,
        "logistic": LogisticModel.load,
        "mlp": MLPModel.load,
        "random_forest": RandomForestModel.load,
        "parallel": ParallelEnsemble.load,
        "cascade": CascadeEnsemble.load,
    }
    if meta.get("name") not in loaders:
        raise ValueError(f"{directory}: unknown model kind {meta.get('name')!r}")
    model: Model = loaders[meta["name"]](directory, meta)
    return model


def model_names(selected: Sequence[str]) -> tuple[str, ...]:
    unknown = [m for m in selected if m not in ALL_MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(ALL_MODELS)}")
    return tuple(selected)
