"""The one model registry: every model name, how to make one and how to load any of them (saving is
predictor.members.save, the same for every model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictor.ensembles import CascadeEnsemble, ParallelEnsemble
from predictor.members import SINGLE_MODELS, load_single, make_single
from predictor.models import Model
from predictor.sliding_ensemble import SLIDING_ENSEMBLES

ENSEMBLES = ("parallel", "cascade")
ALL_MODELS = (*SINGLE_MODELS, *ENSEMBLES)


def make(name: str, n_jobs: int = 2) -> Model:
    """A single model or an ensemble by name."""
    if name in ("parallel", "parallel_rank"):
        return ParallelEnsemble.of(n_jobs=n_jobs)
    if name == "cascade":
        return CascadeEnsemble.of(n_jobs=n_jobs)
    return make_single(name, n_jobs)


def load(directory: Path, meta: dict[str, Any]) -> Model:
    ensembles: dict[str, Any] = {"parallel": ParallelEnsemble.load, "cascade": CascadeEnsemble.load}
    if meta.get("name") in ensembles:
        model: Model = ensembles[meta["name"]](directory, meta)
        return model
    return load_single(directory, meta)


def model_names(selected: Sequence[str]) -> tuple[str, ...]:
    """The models a backtest (`evaluate`) may run: every trainable model and the sliding ensembles, which
    exist only in a backtest (they average over retrains the backtest walks)."""
    known = (*ALL_MODELS, *SLIDING_ENSEMBLES)
    unknown = [m for m in selected if m not in known]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return tuple(selected)
