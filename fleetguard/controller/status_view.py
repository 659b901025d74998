"""`fleetguard status`: read /v1/fleet, /v1/hosts and /v1/findings from a controller, print a summary."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fleetguard.secret_files import SecretFileError, read_secret_text


class StatusError(Exception):
    """The controller cannot be read; one line saying why."""


def _get(base: str, path: str, token: str | None) -> Any:
    request = urllib.request.Request(base.rstrip("/") + path)  # noqa: S310 (checked: http or https)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http/https only)
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise StatusError(f"controller {base} answered {exc.code} for {path}: {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise StatusError(f"cannot read controller {base}: {exc}") from exc


def read_client_token(token_file: Path, key: str = "--token-file") -> str:
    """An operator's or agent's token for the read API, through the one secret-file reader."""
    try:
        return read_secret_text(key, token_file, 4096)
    except SecretFileError as exc:
        raise StatusError(str(exc)) from exc


def fetch_status(base: str, token_file: Path | None, setting: str = "--token-file") -> dict[str, Any]:
    if not base.startswith(("http://", "https://")):
        raise StatusError(f"controller URL {base!r}: must start with http:// or https://")
    token = None
    if token_file is not None:
        token = read_client_token(token_file, setting)
    return {
        "fleet": _get(base, "/v1/fleet", token),
        "hosts": _get(base, "/v1/hosts", token)["hosts"],
        "findings": _get(base, f"/v1/findings?since={time.time() - 3600:.0f}&limit=200", token)["findings"],
    }


def render_status(status: dict[str, Any]) -> str:
    fleet = status["fleet"]
    lines = [
        f"hosts {fleet['hosts']}  silent {fleet['hosts_silent']}  GPUs {fleet['gpus']}  "
        f"jobs {fleet['jobs']}  open findings {fleet['open_findings']}  at-risk GPUs {fleet['at_risk_gpus']}"
    ]
    silent = [h for h in status["hosts"] if h["silent"]]
    for host in silent:
        lines.append(f"  silent   {host['host']}: last heard {host['last_seen_seconds_ago']:.0f} s ago")
    at_risk = [f for f in status["findings"] if f["kind"] == "at_risk_gpu"]
    for finding in at_risk[:10]:
        lines.append(f"  at risk  {finding['host'] or '-'} {finding['gpu_uuid'] or ''}: {finding['summary']}")
    others = [f for f in status["findings"] if f["kind"] != "at_risk_gpu"]
    for finding in others[:10]:
        lines.append(f"  {finding['severity']:8s} {finding['subject']}: {finding['summary']}")
    if len(others) > 10:
        lines.append(f"  ... and {len(others) - 10} more findings in the last hour")
    return "\n".join(lines) + "\n"
