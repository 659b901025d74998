"""Operator requests to a running process that holds the store: a file beside the store, consumed once.

DuckDB lets one process write; while `fleetguard up` (or the controller) runs, `fleetguard breaker reset`
and `fleetguard alerts replay` leave a request here instead, and the running service carries it out
within a round. The file lives in the store's directory, so only who may write the store may ask.
"""

from __future__ import annotations

import contextlib
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Any

MAX_REQUEST_BYTES = 4096


class Request(StrEnum):
    BREAKER_RESET = "breaker-reset"
    ALERTS_REPLAY = "alerts-replay"
    ALERTS_SILENCE = "alerts-silence"  # {"ops": [{"op": "add" | "end", ...}, ...]}, carried out in order
    MODEL_OPS = "model-ops"  # {"ops": [{"op": "promote" | "rollback", "model_id", "actor"}, ...]}


def request_path(store_path: str, request: Request) -> Path:
    return Path(f"{store_path}.{request.value}")


def leave(store_path: str, request: Request, payload: dict[str, Any]) -> Path:
    path = request_path(store_path, request)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)
    return path


def append(store_path: str, request: Request, item: dict[str, Any]) -> Path:
    """Add one operation to a request that queues several ({"ops": [...]}); ValueError when the queue is
    full (the running service takes it within a round)."""
    pending = request_path(store_path, request)
    ops: list[Any] = []
    with contextlib.suppress(OSError, ValueError):
        existing = json.loads(pending.read_bytes()[: MAX_REQUEST_BYTES + 1])
        if isinstance(existing, dict) and isinstance(existing.get("ops"), list):
            ops = existing["ops"]
    payload = {"ops": [*ops, item]}
    if len(json.dumps(payload)) > MAX_REQUEST_BYTES:
        raise ValueError("too many requests are queued: the running fleetguard takes them within a round")
    return leave(store_path, request, payload)


def take(store_path: str, request: Request) -> dict[str, Any] | None:
    """The pending request (removed), or None; an unreadable one is removed and ignored."""
    path = request_path(store_path, request)
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_REQUEST_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError:
        return None
    with contextlib.suppress(OSError):
        path.unlink()
    try:
        payload = json.loads(data) if len(data) <= MAX_REQUEST_BYTES else None
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None
