"""Fleetguard's silences mirrored into Alertmanager receivers (API v2), so that Alertmanager mutes the same
alerts itself: they stay firing there, shown as suppressed, instead of going quiet and resolving.

Stateless: each sync reads Alertmanager's silences and finds ours by the comment's prefix, so a restart
neither duplicates nor forgets them. Only a silence whose matchers are all Alertmanager labels of our alerts
can be mirrored; the relay mutes any other at its end.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.parse
from collections.abc import Sequence
from typing import Any

from diagnosis.alert_payloads import iso
from fleetguard.alerts.silence_rules import Silence, alertmanager_matchers

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v2/alerts"
COMMENT_PREFIX = "fleetguard "
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def api_base(alerts_url: str) -> str | None:
    """The API root of an endpoint configured as `.../api/v2/alerts`; None for any other URL."""
    parts = urllib.parse.urlsplit(alerts_url)
    if not parts.path.endswith(ALERTS_PATH):
        return None
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.removesuffix(ALERTS_PATH), query=""))


def silence_body(silence: Silence) -> dict[str, Any] | None:
    matchers = alertmanager_matchers(silence)
    if matchers is None:
        return None
    return {
        "matchers": matchers,
        "startsAt": iso(silence.created_at),
        "endsAt": iso(silence.expires_at),
        "createdBy": silence.created_by,
        "comment": f"{COMMENT_PREFIX}{silence.silence_id}: {silence.reason}"[:1000],
    }


def ours(remote: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Our silence id -> Alertmanager's silence id, for our silences Alertmanager has active or pending."""
    out: dict[str, str] = {}
    for item in remote:
        comment = str(item.get("comment", ""))
        state = str((item.get("status") or {}).get("state", ""))
        if comment.startswith(COMMENT_PREFIX) and state in ("active", "pending"):
            out[comment.removeprefix(COMMENT_PREFIX).split(":", 1)[0]] = str(item.get("id", ""))
    return out


def sync(base: str, silences: Sequence[Silence], timeout_seconds: float) -> None:
    """Make Alertmanager's active fleetguard silences those of `silences` that can be mirrored; raises
    OSError / ValueError when Alertmanager cannot be asked (the relay retries at its next sync)."""
    wanted = {s.silence_id: body for s in silences if (body := silence_body(s)) is not None}
    status, data = _call("GET", f"{base}/api/v2/silences", None, timeout_seconds)
    if status != 200:
        raise ValueError(f"GET silences: HTTP {status}")
    present = ours(json.loads(data))
    for silence_id, body in wanted.items():
        if silence_id not in present:
            status, _ = _call("POST", f"{base}/api/v2/silences", body, timeout_seconds)
            if status != 200:
                raise ValueError(f"POST silence {silence_id}: HTTP {status}")
    for silence_id, remote_id in present.items():
        if silence_id not in wanted and remote_id:
            status, _ = _call("DELETE", f"{base}/api/v2/silence/{urllib.parse.quote(remote_id)}", None, 5)
            if status != 200:
                raise ValueError(f"DELETE silence {remote_id}: HTTP {status}")


def _call(method: str, url: str, body: Any, timeout_seconds: float) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_class(parts.hostname or "", parts.port, timeout=timeout_seconds)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(method, parts.path or "/", body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(MAX_RESPONSE_BYTES)
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
