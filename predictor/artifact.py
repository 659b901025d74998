"""Model directories: the model's arrays/JSON, its feature schema, training window, metrics and versions.

`model.json` describes everything needed to rebuild the features and the model; nothing is pickled.
Loading checks the format; scoring data without the columns the model was trained on fails clearly.
"""

from __future__ import annotations

import json
import platform
import zipfile
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb

from predictor.dataset import DatasetSpec, Instances, build_instances, fetch_instances
from predictor.feature_choice import Categories
from predictor.members import save as save_any
from predictor.models import Model
from predictor.registry import load as load_any
from predictor.risk_policy import RiskPolicy

FORMAT = "fleetguard-predictor-model"
FORMAT_VERSION = 1
META_FILE = "model.json"


class ArtifactError(ValueError):
    """A model directory that cannot be used: missing, of another format, or a schema mismatch."""


@dataclass
class LoadedModel:
    model: Model
    spec: DatasetSpec
    feature_columns: tuple[str, ...]  # input sample columns the features are built from
    event_kinds: tuple[str, ...]
    feature_names: tuple[str, ...]
    meta: dict[str, Any]
    categories: Categories = ()
    policy: RiskPolicy | None = None  # None: a model saved before calibration; it cannot score live

    @property
    def input_columns(self) -> tuple[str, ...]:
        """Every sample column the features read: numeric ones and text ones."""
        return (*self.feature_columns, *(c for c, _ in self.categories))

    @property
    def model_id(self) -> str:
        return str(self.meta.get("model_id", self.model.name))


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    # XGBoost comes as `xgboost` (GPU build) or `xgboost-cpu`: the same library, recorded under one name.
    names = {"xgboost": ("xgboost", "xgboost-cpu")}
    for lib in ("fleetguard", "duckdb", "numpy", "scikit-learn", "xgboost", "pyarrow"):
        out[lib] = "not installed"
        for dist in names.get(lib, (lib,)):
            try:
                out[lib] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def save(
    directory: Path,
    model: Model,
    spec: DatasetSpec,
    feature_columns: tuple[str, ...],
    event_kinds: tuple[str, ...],
    feature_names: tuple[str, ...],
    training_window: tuple[float, float],
    metrics: dict[str, Any],
    model_id: str | None = None,
    categories: Categories = (),
    policy: RiskPolicy | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    model_meta = save_any(model, directory / "model")
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_id": model_id or f"{model.name}-{int(training_window[1])}",
        "model": model_meta,
        "dataset": asdict(spec),
        "feature_schema": {
            "sample_columns": list(feature_columns),
            "event_kinds": list(event_kinds),
            "features": list(feature_names),
            # text column -> the values with a 0/1 feature (fixed on the training window; others are 0)
            "categories": {c: list(values) for c, values in categories},
        },
        "training_window": {"start_ts": training_window[0], "end_ts": training_window[1]},
        "metrics": metrics,
        "library_versions": library_versions(),
    }
    if policy is not None:
        meta["risk_policy"] = policy.to_dict()
    (directory / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return directory


def load(directory: Path) -> LoadedModel:
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise ArtifactError(f"{directory}: not a model directory (no {META_FILE})")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{meta_path}: not valid JSON: {exc}") from exc
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{meta_path}: format {meta.get('format')!r} v{meta.get('format_version')!r}, "
            f"expected {FORMAT!r} v{FORMAT_VERSION}"
        )
    _check_names(meta, meta_path)
    try:
        schema = meta["feature_schema"]
        d = meta["dataset"]
        spec = DatasetSpec(
            window_seconds=float(d["window_seconds"]),
            horizon_seconds=float(d["horizon_seconds"]),
            step_seconds=float(d["step_seconds"]),
            event_kinds=tuple(d["event_kinds"]),
            max_event_kinds=int(d["max_event_kinds"]),
        )
        return LoadedModel(
            model=load_any(directory / "model", meta["model"]),
            spec=spec,
            feature_columns=tuple(schema["sample_columns"]),
            event_kinds=tuple(schema["event_kinds"]),
            feature_names=tuple(schema["features"]),
            meta=meta,
            categories=tuple(
                (str(c), tuple(str(v) for v in values)) for c, values in schema.get("categories", {}).items()
            ),
            policy=_policy(meta, len(schema["features"])),
        )
    except ArtifactError:
        raise
    except (KeyError, TypeError, ValueError, OSError, zipfile.BadZipFile) as exc:
        # a hand-edited, truncated or half-copied model directory: say which, never a traceback
        raise ArtifactError(
            f"{directory}: incomplete or damaged model ({type(exc).__name__}: {exc})"
        ) from exc


def _policy(meta: dict[str, Any], n_features: int) -> RiskPolicy | None:
    if "risk_policy" not in meta:
        return None
    policy = RiskPolicy.from_dict(meta["risk_policy"])
    if len(policy.reference) != n_features:
        raise ValueError(
            f"risk_policy.reference has {len(policy.reference)} values for {n_features} features"
        )
    return policy


def require_policy(loaded: LoadedModel) -> RiskPolicy:
    """The model's calibration and selection rule, or a clear error for a model saved without them."""
    if loaded.policy is None:
        raise ArtifactError(
            f"model {loaded.model_id} carries no calibration or selection rule (saved by an older "
            "fleetguard): retrain it with `fleetguard train` to score live"
        )
    return loaded.policy


def _check_names(node: Any, meta_path: Path) -> None:
    """Every "file" and "dir" the metadata names must be a plain name inside the model directory."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "dir") and (
                not isinstance(value, str)
                or not value
                or value in (".", "..")
                or "/" in value
                or "\\" in value
            ):
                raise ArtifactError(
                    f"{meta_path}: {key} {value!r} is not a plain name inside the model directory"
                )
            _check_names(value, meta_path)
    elif isinstance(node, list):
        for item in node:
            _check_names(item, meta_path)


def check_schema(loaded: LoadedModel, available_columns: tuple[str, ...], where: str, fix: str = "") -> None:
    """Raise when the data lacks a column the model was trained on (extra columns are fine); `fix` says
    how to get a model that fits this data (the caller knows what the data is)."""
    missing = [c for c in loaded.input_columns if c not in available_columns]
    if missing:
        raise ArtifactError(
            f"{where}: feature schema mismatch: the model was trained with column(s) "
            f"{', '.join(missing)} that the data lacks (data has: {', '.join(available_columns)})"
            + (f"; {fix}" if fix else "")
        )


def model_instances(con: duckdb.DuckDBPyConnection, loaded: LoadedModel, table: str) -> Instances:
    """`loaded`'s instances from the contract views registered in `con` (materialised as `table`), its
    features exactly: ArtifactError when the views give another feature schema."""
    names = build_instances(
        con,
        loaded.feature_columns,
        loaded.spec,
        loaded.event_kinds,
        table=table,
        categories=loaded.categories,
    )
    if names != loaded.feature_names:
        raise ArtifactError(f"model {loaded.model_id}: the store's features differ from its own")
    return fetch_instances(con, names, table=table)
