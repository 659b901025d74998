"""The operator's side of a running process's read API: commands that find the store held by `fleetguard
controller` or `up` (DuckDB has one writer) ask that process over HTTP instead (`breaker status`, `alerts
status`, `export`). The process is on this host (it holds a file here), so it is asked on loopback at the port
it announced; off-loopback listeners need the operator token (--token-file) for reads, as `status` does."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import click

from fleetguard.secret_files import SecretFileError, read_secret_text

TIMEOUT_SECONDS = 120.0  # an export's snapshot of a large store takes a while


class ReadApiError(Exception):
    """The running process could not answer; one line saying why."""


def token_option(fn: Any) -> Any:
    return click.option(
        "--token-file",
        type=click.Path(dir_okay=False),
        help="Operator token, for a running controller that listens off loopback "
        "(`fleetguard controller token --operator`).",
    )(fn)


def read_token(token_file: str | None) -> str | None:
    if not token_file:
        return None
    try:
        return read_secret_text("--token-file", Path(token_file), 4096)
    except SecretFileError as exc:
        raise ReadApiError(str(exc)) from exc


def local_url(url: str) -> str:
    """The announced URL with its host made loopback when it was a wildcard (0.0.0.0, ::)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 (a listen address read back, not one bound here)
        netloc = f"127.0.0.1:{parts.port}" if parts.port else "127.0.0.1"
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return url


def request(
    base: str, path: str, token: str | None, *, method: str = "GET", body: bytes | None = None
) -> tuple[str, bytes]:
    """(content type, body) of one request; ReadApiError naming the process's answer otherwise."""
    req = urllib.request.Request(local_url(base).rstrip("/") + path, data=body, method=method)  # noqa: S310
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (http/https)
            return response.headers.get_content_type(), response.read()
    except urllib.error.HTTPError as exc:
        detail = ""
        with contextlib.suppress(ValueError, AttributeError, OSError):
            detail = str(json.loads(exc.read()).get("error", ""))
        hint = " (an operator token is needed: --token-file)" if exc.code in (401, 403) else ""
        raise ReadApiError(f"{base}{path} answered {exc.code}: {detail or exc.reason}{hint}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ReadApiError(f"cannot reach {base}: {getattr(exc, 'reason', exc)}") from exc


def get_json(base: str, path: str, token: str | None, *, method: str = "GET", doc: object = None) -> Any:
    body = None if doc is None else json.dumps(doc).encode()
    kind, data = request(base, path, token, method=method, body=body)
    if kind != "application/json":
        raise ReadApiError(f"{base}{path} answered {kind}, not fleetguard's read API")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ReadApiError(f"{base}{path} answered something that is not JSON") from exc


def ask_holder_url(locked: Exception) -> tuple[str, str]:
    """(read API URL, description) of the process that holds a store (`locked`: a StoreLocked naming its
    holder); a one-line ClickException when it serves none (an agent) or did not say."""
    holder = getattr(locked, "holder", None)
    url = str(getattr(holder, "url", "") or "")
    if holder is None or not url:
        raise click.ClickException(str(locked))
    return url, str(holder.describe())


def ask_holder(
    locked: Exception, path: str, token_file: str | None, *, method: str = "GET", doc: object = None
) -> Any:
    """Ask the process that holds a store through its read API; a one-line ClickException naming that
    process when it serves none or cannot answer."""
    url, who = ask_holder_url(locked)
    try:
        return get_json(url, path, read_token(token_file), method=method, doc=doc)
    except ReadApiError as exc:
        raise click.ClickException(f"the store is held by {who}, asked instead: {exc}") from exc
