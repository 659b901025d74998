"""The model registry (store migration 15): every model a retrain made, its window, its gate figures, its
state, and who promoted it; and an append-only log of what happened to each (the audit trail).

At most one model is `active`. Scoring serves the active model, or the operator's own model in
`[predictor] model_dir` when none is (a fresh store, or after rolling the last one back). A model's files
live in `<model_dir>/models/<model_id>`: the registry keeps the id, never a path to load from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import duckdb

REGISTRY_DDL = (
    """CREATE TABLE IF NOT EXISTS model_registry (
  model_id VARCHAR NOT NULL,
  created_ts DOUBLE NOT NULL,
  train_start_ts DOUBLE NOT NULL,
  train_end_ts DOUBLE NOT NULL,
  state VARCHAR NOT NULL,
  figures_json VARCHAR NOT NULL,
  promoted_by VARCHAR,
  promoted_ts DOUBLE,
  files_kept BOOLEAN NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS model_registry_log (
  ts DOUBLE NOT NULL,
  model_id VARCHAR NOT NULL,
  action VARCHAR NOT NULL,
  actor VARCHAR NOT NULL,
  detail VARCHAR NOT NULL
)""",
)

MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
MAX_ACTOR_CHARS = 200
MAX_DETAIL_CHARS = 1000
BASE_MODEL = "(model_dir)"  # what serves when no registry model is active: the operator's own model


class ModelState(StrEnum):
    CANDIDATE = "candidate"  # trained, not decided yet
    ACTIVE = "active"  # serving
    RETIRED = "retired"  # served once; rollback can bring it back
    REJECTED = "rejected"  # the gate found it worse than the model serving then


class LogAction(StrEnum):
    TRAINED = "trained"
    PROMOTED = "promoted"
    REJECTED = "rejected"
    RETIRED = "retired"
    ROLLED_BACK = "rolled-back"
    RETRAIN_FAILED = "retrain-failed"
    FILES_REMOVED = "files-removed"


class RegistryError(ValueError):
    """An operation the registry refuses: an unknown id, nothing to roll back. One line for the operator."""


@dataclass(frozen=True)
class ModelRecord:
    model_id: str
    created_ts: float
    train_start_ts: float
    train_end_ts: float
    state: ModelState
    figures: dict[str, Any]
    promoted_by: str | None = None
    promoted_ts: float | None = None
    files_kept: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "created_ts": self.created_ts,
            "train_window": [self.train_start_ts, self.train_end_ts],
            "state": self.state.value,
            "figures": self.figures,
            "promoted_by": self.promoted_by,
            "promoted_ts": self.promoted_ts,
            "files_kept": self.files_kept,
        }


@dataclass(frozen=True)
class LogEntry:
    ts: float
    model_id: str
    action: LogAction
    actor: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "model_id": self.model_id,
            "action": self.action.value,
            "actor": self.actor,
            "detail": self.detail,
        }


def create_registry_tables(con: duckdb.DuckDBPyConnection) -> None:
    for sql in REGISTRY_DDL:
        con.execute(sql)


def check_model_id(model_id: str) -> str:
    """The id, or RegistryError: ids name directories under model_dir, so only plain names pass."""
    if not MODEL_ID.match(model_id):
        raise RegistryError(f"{model_id[:100]!r} is not a model id (letters, digits, '.', '_', '-')")
    return model_id


_COLUMNS = (
    "model_id, created_ts, train_start_ts, train_end_ts, state, figures_json, promoted_by, promoted_ts, "
    "files_kept"
)


def _record(row: tuple[Any, ...]) -> ModelRecord:
    return ModelRecord(
        model_id=str(row[0]),
        created_ts=float(row[1]),
        train_start_ts=float(row[2]),
        train_end_ts=float(row[3]),
        state=ModelState(row[4]),
        figures=json.loads(row[5]),
        promoted_by=row[6],
        promoted_ts=None if row[7] is None else float(row[7]),
        files_kept=bool(row[8]),
    )


def add_model(con: duckdb.DuckDBPyConnection, record: ModelRecord, actor: str) -> None:
    check_model_id(record.model_id)
    if get_model(con, record.model_id) is not None:
        raise RegistryError(f"model {record.model_id} is already registered")
    con.execute(
        f"INSERT INTO model_registry ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            record.model_id,
            record.created_ts,
            record.train_start_ts,
            record.train_end_ts,
            record.state.value,
            json.dumps(record.figures, sort_keys=True),
            record.promoted_by,
            record.promoted_ts,
            record.files_kept,
        ],
    )
    log(con, record.created_ts, record.model_id, LogAction.TRAINED, actor, "")


def log(
    con: duckdb.DuckDBPyConnection, ts: float, model_id: str, action: LogAction, actor: str, detail: str
) -> None:
    con.execute(
        "INSERT INTO model_registry_log VALUES (?, ?, ?, ?, ?)",
        [ts, model_id, action.value, actor[:MAX_ACTOR_CHARS], detail[:MAX_DETAIL_CHARS]],
    )


def list_models(con: duckdb.DuckDBPyConnection, limit: int = 100) -> list[ModelRecord]:
    """Newest first."""
    rows = con.execute(
        f"SELECT {_COLUMNS} FROM model_registry ORDER BY created_ts DESC, model_id DESC LIMIT ?", [limit]
    ).fetchall()
    return [_record(r) for r in rows]


def get_model(con: duckdb.DuckDBPyConnection, model_id: str) -> ModelRecord | None:
    rows = con.execute(f"SELECT {_COLUMNS} FROM model_registry WHERE model_id = ?", [model_id]).fetchall()
    return _record(rows[0]) if rows else None


def active_model(con: duckdb.DuckDBPyConnection) -> ModelRecord | None:
    rows = con.execute(
        f"SELECT {_COLUMNS} FROM model_registry WHERE state = 'active' ORDER BY promoted_ts DESC LIMIT 1"
    ).fetchall()
    return _record(rows[0]) if rows else None


def served_before(con: duckdb.DuckDBPyConnection, model_id: str, limit: int) -> list[ModelRecord]:
    """Up to `limit` models that served before `model_id` (retired, first promoted before it, files kept),
    the most recently promoted first: the retrains live scoring averages its ranks over."""
    if limit <= 0:
        return []
    rows = con.execute(
        f"SELECT {_COLUMNS} FROM model_registry WHERE state = 'retired' AND files_kept "
        "AND promoted_ts IS NOT NULL AND model_id <> ? "
        "AND promoted_ts < (SELECT promoted_ts FROM model_registry WHERE model_id = ?) "
        "ORDER BY promoted_ts DESC, model_id DESC LIMIT ?",
        [model_id, model_id, limit],
    ).fetchall()
    return [_record(r) for r in rows]


def history(con: duckdb.DuckDBPyConnection, model_id: str | None = None, limit: int = 100) -> list[LogEntry]:
    """The log, newest first (of one model when given)."""
    where, args = ("WHERE model_id = ?", [model_id]) if model_id else ("", [])
    rows = con.execute(
        f"SELECT ts, model_id, action, actor, detail FROM model_registry_log {where} "
        "ORDER BY ts DESC LIMIT ?",
        [*args, limit],
    ).fetchall()
    return [LogEntry(float(r[0]), str(r[1]), LogAction(r[2]), str(r[3]), str(r[4])) for r in rows]


def set_state(
    con: duckdb.DuckDBPyConnection, model_id: str, state: ModelState, figures: dict[str, Any] | None = None
) -> None:
    if figures is None:
        con.execute("UPDATE model_registry SET state = ? WHERE model_id = ?", [state.value, model_id])
    else:
        con.execute(
            "UPDATE model_registry SET state = ?, figures_json = ? WHERE model_id = ?",
            [state.value, json.dumps(figures, sort_keys=True), model_id],
        )


def promote(
    con: duckdb.DuckDBPyConnection, model_id: str, actor: str, now: float, detail: str = ""
) -> ModelRecord:
    """Make `model_id` the active model and retire the one serving; the caller holds a transaction."""
    record = get_model(con, check_model_id(model_id))
    if record is None:
        raise RegistryError(f"no model {model_id} in the registry")
    if record.state is ModelState.ACTIVE:
        raise RegistryError(f"model {model_id} is already active")
    if not record.files_kept:
        raise RegistryError(f"model {model_id}'s files were removed (only the newest models keep theirs)")
    current = active_model(con)
    if current is not None:
        set_state(con, current.model_id, ModelState.RETIRED)
        log(con, now, current.model_id, LogAction.RETIRED, actor, f"replaced by {model_id}")
    con.execute(
        "UPDATE model_registry SET state = 'active', promoted_by = ?, promoted_ts = ? WHERE model_id = ?",
        [actor[:MAX_ACTOR_CHARS], now, model_id],
    )
    replaced = current.model_id if current else BASE_MODEL
    log(con, now, model_id, LogAction.PROMOTED, actor, detail or f"replaces {replaced}")
    promoted = get_model(con, model_id)
    assert promoted is not None
    return promoted


def rollback(
    con: duckdb.DuckDBPyConnection, actor: str, now: float
) -> tuple[ModelRecord, ModelRecord | None]:
    """Retire the active model and bring back the one that served before it (the retired model promoted
    most recently before it, with its files); None: the operator's own model in model_dir serves again."""
    current = active_model(con)
    if current is None:
        raise RegistryError("no registry model is active: the model in model_dir already serves")
    rows = con.execute(
        f"SELECT {_COLUMNS} FROM model_registry WHERE state = 'retired' AND files_kept "
        "AND promoted_ts IS NOT NULL AND promoted_ts <= ? AND model_id <> ? "
        "ORDER BY promoted_ts DESC LIMIT 1",
        [current.promoted_ts or now, current.model_id],
    ).fetchall()
    previous = _record(rows[0]) if rows else None
    set_state(con, current.model_id, ModelState.RETIRED)
    back_to = previous.model_id if previous else BASE_MODEL
    log(con, now, current.model_id, LogAction.ROLLED_BACK, actor, f"back to {back_to}")
    if previous is None:
        return current, None
    # the restored model keeps its first promotion time, so a second rollback goes further back
    set_state(con, previous.model_id, ModelState.ACTIVE)
    log(con, now, previous.model_id, LogAction.PROMOTED, actor, f"rollback from {current.model_id}")
    restored = get_model(con, previous.model_id)
    assert restored is not None
    return current, restored


def mark_files_removed(con: duckdb.DuckDBPyConnection, model_id: str, now: float, actor: str) -> None:
    con.execute("UPDATE model_registry SET files_kept = false WHERE model_id = ?", [model_id])
    log(con, now, model_id, LogAction.FILES_REMOVED, actor, "")
