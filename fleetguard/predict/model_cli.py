"""`fleetguard model list | show ID | promote ID | rollback`: the model registry.

With --url, through a running controller's API (an operator token from --token-file: required to change
anything, and to read off loopback). Without, on the store file; when a running `up` or controller holds
it, list and show ask that process's read API (named in the holder file beside the store), and promote
and rollback are left beside the store for the running process to carry out within seconds
(store/operator_requests.py). Every change is written to the registry's log with who made it.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import duckdb

from fleetguard.config_options import config_options, load
from fleetguard.predict import model_ops
from fleetguard.read_client import ask_holder
from fleetguard.secret_files import SecretFileError, read_secret_text
from fleetguard.store import Store, StoreError, StoreLocked
from fleetguard.store.model_registry import RegistryError, check_model_id
from fleetguard.store.operator_requests import Request, append

HTTP_TIMEOUT_SECONDS = 30.0


def remote_options(fn: Any) -> Any:
    fn = click.option("--url", help="A running controller's URL (http:// or https://).")(fn)
    fn = click.option(
        "--token-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Operator token (to change the registry; to read it off loopback).",
    )(fn)
    fn = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)
    return config_options(fn)


@click.group("model")
def model_group() -> None:
    """The model registry: list, show, promote and roll back retrained models."""


@model_group.command("list")
@remote_options
def list_command(
    config_path: str | None, store_path: str | None, url: str | None, token_file: Path | None, as_json: bool
) -> None:
    """Every model a retrain made, newest first, with its state and gate figures."""
    if url:
        doc = _call(url, token_file, "GET", "/v1/models")
    else:
        doc = _read(config_path, store_path, model_ops.listing, "/v1/models", token_file)
    click.echo(json.dumps(doc, indent=2) if as_json else render_listing(doc))


@model_group.command("show")
@click.argument("model_id")
@remote_options
def show_command(
    model_id: str,
    config_path: str | None,
    store_path: str | None,
    url: str | None,
    token_file: Path | None,
    as_json: bool,
) -> None:
    """One model: its window, the gate's figures, and what happened to it."""
    _check_id(model_id)
    if url:
        doc = _call(url, token_file, "GET", f"/v1/models/{model_id}")
    else:
        doc = _read(
            config_path,
            store_path,
            lambda con: model_ops.describe(con, model_id),
            f"/v1/models/{model_id}",
            token_file,
        )
    click.echo(json.dumps(doc, indent=2) if as_json else render_model(doc))


@model_group.command("promote")
@click.argument("model_id")
@remote_options
def promote_command(
    model_id: str,
    config_path: str | None,
    store_path: str | None,
    url: str | None,
    token_file: Path | None,
    as_json: bool,
) -> None:
    """Make MODEL_ID the serving model (the one serving now is retired); scoring takes it up next round."""
    _check_id(model_id)
    if url:
        doc = _call(url, token_file, "POST", "/v1/models/promote", {"model_id": model_id})
        _print_result(doc, as_json)
        return
    config = load(config_path, **{"store.path": store_path})
    model_dir = Path(config.predictor.model_dir) if config.predictor.model_dir else None
    _change(
        config.store.path,
        {"op": "promote", "model_id": model_id},
        lambda con, actor: model_ops.promote(con, model_dir, model_id, actor, time.time()),
        as_json,
    )


@model_group.command("rollback")
@remote_options
def rollback_command(
    config_path: str | None, store_path: str | None, url: str | None, token_file: Path | None, as_json: bool
) -> None:
    """Retire the serving model and bring back the one that served before it."""
    if url:
        _print_result(_call(url, token_file, "POST", "/v1/models/rollback", {}), as_json)
        return
    config = load(config_path, **{"store.path": store_path})
    _change(
        config.store.path,
        {"op": "rollback"},
        lambda con, actor: model_ops.rollback(con, actor, time.time()),
        as_json,
    )


COMMANDS: list[click.Command] = [model_group]


# ---- the store file ---------------------------------------------------------------------------------------


def _read(
    config_path: str | None,
    store_path: str | None,
    read: Callable[[duckdb.DuckDBPyConnection], Any],
    api_path: str,
    token_file: Path | None,
) -> Any:
    """`read` over the store file, or GET `api_path` of the process that holds it (its read API)."""
    config = load(config_path, **{"store.path": store_path})
    try:
        with Store.open(config.store.path, read_only=True) as store:
            return read(store.cursor())
    except StoreLocked as exc:
        if exc.holder is None:  # it did not say who it is (an older fleetguard): no API to find
            raise click.ClickException(f"{exc} (or ask a running controller with --url)") from exc
        return ask_holder(exc, api_path, str(token_file) if token_file else None)
    except (StoreError, RegistryError) as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.CatalogException as exc:
        raise click.ClickException(
            f"{config.store.path} has no model registry (made by an older fleetguard; open it once with "
            "this one)"
        ) from exc


def _change(
    path: str,
    request: dict[str, Any],
    act: Callable[[duckdb.DuckDBPyConnection, str], model_ops.OpResult],
    as_json: bool,
) -> None:
    actor = _local_actor()
    try:
        store = Store.open(path, must_exist=True)
    except StoreLocked:
        try:
            append(path, Request.MODEL_OPS, {**request, "actor": actor})
        except (OSError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
        _print_result(
            {
                "message": "the store is in use: the running fleetguard carries this out within seconds "
                "(`fleetguard model list` asks it; its log says so too)",
                "active": None,
            },
            as_json,
        )
        return
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
    with store:
        try:
            done = act(store.cursor(), actor)
        except RegistryError as exc:
            raise click.ClickException(str(exc)) from exc
    _print_result(done.to_json(), as_json)


def _local_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown user"
    return f"{user}@{socket.gethostname()} (fleetguard model, on the store)"


# ---- a running controller -----------------------------------------------------------------------------


def _call(
    base: str, token_file: Path | None, method: str, path: str, body: dict[str, Any] | None = None
) -> Any:
    if not base.startswith(("http://", "https://")):
        raise click.ClickException(f"controller URL {base!r}: must start with http:// or https://")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method)  # noqa: S310
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token_file is not None:
        try:
            token = read_secret_text("--token-file", token_file, 4096)
        except SecretFileError as exc:
            raise click.ClickException(str(exc)) from exc
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise click.ClickException(f"controller {base} answered {exc.code}: {_error_of(exc)}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot reach controller {base}: {exc}") from exc


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(exc.read(4096))
        return str(doc.get("error", exc.reason))[:300] if isinstance(doc, dict) else str(exc.reason)
    except (ValueError, OSError):
        return str(exc.reason)


# ---- output ---------------------------------------------------------------------------------------------


def _check_id(model_id: str) -> None:
    try:
        check_model_id(model_id)
    except RegistryError as exc:
        raise click.BadParameter(str(exc)) from exc


def _print_result(doc: dict[str, Any], as_json: bool) -> None:
    click.echo(json.dumps(doc, indent=2) if as_json else str(doc.get("message", "")))


def _utc(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _precisions(figures: dict[str, Any]) -> str:
    cand = (figures.get("candidate") or {}).get("precision")
    cur = (figures.get("current") or {}).get("precision")
    if cand is None and cur is None:
        return "-"
    return f"{_p(cand)} vs {_p(cur)}"


def _p(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"


def render_listing(doc: dict[str, Any]) -> str:
    lines = [f"serving: {doc['active']}"]
    models = doc["models"]
    if not models:
        lines.append("no retrained models yet")
        return "\n".join(lines)
    header = ("MODEL", "STATE", "CREATED (UTC)", "TRAINED ON (UTC)", "PRECISION NEW vs OLD", "BY")
    rows = [
        (
            m["model_id"],
            m["state"] + ("" if m["files_kept"] else " (files removed)"),
            _utc(m["created_ts"]),
            f"{_utc(m['train_window'][0])} .. {_utc(m['train_window'][1])}",
            _precisions(m["figures"]),
            m["promoted_by"] or "-",
        )
        for m in models
    ]
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines)


def render_model(doc: dict[str, Any]) -> str:
    f = doc["figures"]
    lines = [
        f"model      {doc['model_id']}  ({doc['state']})",
        f"created    {_utc(doc['created_ts'])} UTC",
        f"trained on {_utc(doc['train_window'][0])} .. {_utc(doc['train_window'][1])} UTC",
    ]
    if f:
        lines.append(
            f"gate       {f.get('verdict', '-')}: {f.get('reason', '')}; evaluated "
            f"{_utc(f.get('start_ts'))} .. {_utc(f.get('end_ts'))} UTC, {f.get('instances')} instances, "
            f"{f.get('positives')} failing, K = {f.get('k')} (against {f.get('current_model_id', '-')})"
        )
    if doc.get("promoted_by"):
        lines.append(f"promoted   {_utc(doc.get('promoted_ts'))} UTC by {doc['promoted_by']}")
    for entry in doc.get("log", []):
        detail = f": {entry['detail']}" if entry["detail"] else ""
        lines.append(f"  {_utc(entry['ts'])}  {entry['action']:<14} {entry['actor']}{detail}")
    return "\n".join(lines)
