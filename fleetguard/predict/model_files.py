"""Where models live: `<model_dir>` holds the operator's own model, `<model_dir>/models/<id>` each model a
retrain made (written 0600 in 0700 directories), `<model_dir>/retrain` the work of the running retrain.

A model is code-adjacent (its files decide what runs on the fleet), so it is loaded only from these places,
by a registry id checked to be a plain name, never from a path that came from a request or the store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb

from fleetguard.store.model_registry import active_model, check_model_id, served_before

MODELS = "models"
WORK = "retrain"


def models_root(model_dir: Path) -> Path:
    return model_dir / MODELS


def model_path(model_dir: Path, model_id: str) -> Path:
    """The directory of registry model `model_id` (RegistryError for an id that is not a plain name)."""
    return models_root(model_dir) / check_model_id(model_id)


def serving_model(con: duckdb.DuckDBPyConnection, model_dir: Path) -> tuple[Path, str | None]:
    """The model that serves: the registry's active one, else the operator's model in model_dir (id None)."""
    record = active_model(con)
    if record is None:
        return model_dir, None
    return model_path(model_dir, record.model_id), record.model_id


def earlier_models(
    con: duckdb.DuckDBPyConnection, model_dir: Path, serving_id: str | None, count: int
) -> tuple[Path, ...]:
    """The directories of up to `count` registry models that served before `serving_id`, newest first;
    none when the operator's own model serves (nothing served before it)."""
    if serving_id is None or count <= 0:
        return ()
    return tuple(model_path(model_dir, r.model_id) for r in served_before(con, serving_id, count))


def dataset_shape(directory: Path) -> tuple[float, float, float]:
    """(window, horizon, step) seconds of a saved model, read from its metadata only (no model loaded)."""
    meta = json.loads((directory / "model.json").read_text())
    d = meta["dataset"]
    return float(d["window_seconds"]), float(d["horizon_seconds"]), float(d["step_seconds"])


def make_private(directory: Path) -> None:
    """Directories 0700 and files 0600 under `directory` (itself included): models are not for others."""
    for root, dirs, files in os.walk(directory):
        os.chmod(root, 0o700)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), 0o600)
