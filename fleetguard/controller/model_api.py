"""The model registry over the controller's API: GET /v1/models, GET /v1/models/<id>, and the operator
actions POST /v1/models/promote {"model_id"} and POST /v1/models/rollback, audited in the registry's log
with the peer they came from. Routing and authentication stay in server.py."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from fleetguard.httpserve import HttpError, Request, Response
from fleetguard.predict import model_ops
from fleetguard.store.model_registry import RegistryError

PREFIX = "/v1/models/"


def listing(cursor: duckdb.DuckDBPyConnection) -> Response:
    return Response.json(200, model_ops.listing(cursor))


def show(cursor: duckdb.DuckDBPyConnection, request: Request) -> Response:
    model_id = request.path[len(PREFIX) :]
    try:
        return Response.json(200, model_ops.describe(cursor, model_id))
    except RegistryError as exc:
        raise HttpError(404, str(exc)) from exc


def promote(cursor: duckdb.DuckDBPyConnection, model_dir: str, request: Request) -> Response:
    doc = request.json()
    model_id = doc.get("model_id") if isinstance(doc, dict) else None
    if not isinstance(model_id, str) or not 0 < len(model_id) <= 100:
        raise HttpError(400, "expected {model_id}")
    return _act(lambda: model_ops.promote(cursor, _dir(model_dir), model_id, actor(request), time.time()))


def rollback(cursor: duckdb.DuckDBPyConnection, request: Request) -> Response:
    return _act(lambda: model_ops.rollback(cursor, actor(request), time.time()))


def actor(request: Request) -> str:
    """Who, for the audit log: an operator token holder, and where the request came from."""
    host, port = request.connection.peer[:2]
    return f"operator token via API from {host}:{port}"


def _dir(model_dir: str) -> Path:
    if not model_dir:
        raise HttpError(409, "this controller has no [predictor] model_dir: it serves no models")
    return Path(model_dir)


def _act(op: model_ops.Op) -> Response:
    try:
        return Response.json(200, op().to_json())
    except RegistryError as exc:
        raise HttpError(409, str(exc)) from exc
    except duckdb.TransactionException as exc:  # a retrain's result was being recorded at that instant
        raise HttpError(409, f"the registry changed meanwhile; try again ({exc})") from exc
