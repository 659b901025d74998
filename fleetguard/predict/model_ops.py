"""Promote and roll back registry models: the one implementation behind `fleetguard model`, the controller's
API and the requests a running `up` takes from beside its store. Each is an audited operator action: who
did it is written to the registry's log with the change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from fleetguard.predict.model_files import model_path
from fleetguard.store import model_registry as registry


@dataclass(frozen=True)
class OpResult:
    message: str
    active: str  # the model serving after the change (registry.BASE_MODEL: the one in model_dir)

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "active": self.active}


def promote(
    con: duckdb.DuckDBPyConnection,
    model_dir: Path | None,
    model_id: str,
    actor: str,
    now: float,
    *,
    in_transaction: bool = False,
) -> OpResult:
    """RegistryError when the id is unknown, active already, or its files are gone. `in_transaction`: the
    caller holds one (the maintenance thread's tasks), else the change is a transaction of its own."""
    if model_dir is not None and not (model_path(model_dir, model_id) / "model.json").is_file():
        raise registry.RegistryError(f"model {model_id} has no files under {model_dir}")
    with _transaction(con, begin=not in_transaction):
        record = registry.promote(con, model_id, actor, now, "promoted by an operator")
    return OpResult(f"model {record.model_id} is active (promoted by {actor})", record.model_id)


def rollback(
    con: duckdb.DuckDBPyConnection, actor: str, now: float, *, in_transaction: bool = False
) -> OpResult:
    with _transaction(con, begin=not in_transaction):
        retired, restored = registry.rollback(con, actor, now)
    back = restored.model_id if restored else registry.BASE_MODEL
    where = "" if restored else " (the model in [predictor] model_dir)"
    return OpResult(f"rolled back {retired.model_id}: {back} serves{where}", back)


def describe(con: duckdb.DuckDBPyConnection, model_id: str) -> dict[str, Any]:
    record = registry.get_model(con, registry.check_model_id(model_id))
    if record is None:
        raise registry.RegistryError(f"no model {model_id} in the registry")
    return {
        **record.to_json(),
        "log": [e.to_json() for e in registry.history(con, model_id)],
    }


def listing(con: duckdb.DuckDBPyConnection, limit: int = 100) -> dict[str, Any]:
    active = registry.active_model(con)
    return {
        "active": active.model_id if active else registry.BASE_MODEL,
        "models": [r.to_json() for r in registry.list_models(con, limit)],
        "log": [e.to_json() for e in registry.history(con, None, 20)],
    }


class _transaction:
    """BEGIN ... COMMIT, or ROLLBACK on any error; nothing when the caller holds a transaction (DuckDB
    aborts a transaction in which a second BEGIN is tried, so it is never tried)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, begin: bool) -> None:
        self.con = con
        self.begin = begin

    def __enter__(self) -> None:
        if self.begin:
            self.con.execute("BEGIN TRANSACTION")

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        if self.begin:
            self.con.execute("ROLLBACK" if kind is not None else "COMMIT")


Op = Callable[[], OpResult]
