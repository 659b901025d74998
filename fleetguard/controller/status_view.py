"""`fleetguard status`: read /v1/fleet, /v1/hosts and /v1/findings from a controller or a running `up`, and
print the fleet for a person (hosts by health with the reason, the worst open incidents, the breaker, at-risk
GPUs with their jobs, silent hosts, ingest lag) or as JSON for scripts. Health is the one model of
`diagnosis.health`, decided by the process that serves the read API, so it is the dashboard's."""

from __future__ import annotations

import datetime
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetguard.secret_files import SecretFileError, read_secret_text

HOSTS_SHOWN = 40  # hosts listed (worst first); the counts cover every host
NOT_READ_API = (
    "{base} does not serve fleetguard's read API ({why}): point --controller at the controller's "
    "controller.listen address (default http://127.0.0.1:9480), not the dashboard's or an agent's /metrics"
)


class StatusError(Exception):
    """The controller cannot be read; one line saying why."""


def _get(base: str, path: str, token: str | None) -> Any:
    request = urllib.request.Request(base.rstrip("/") + path)  # noqa: S310 (checked: http or https)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http/https only)
            kind = response.headers.get_content_type()
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise StatusError(NOT_READ_API.format(base=base, why=f"{path} is 404")) from exc
        if exc.code in (401, 403):
            raise StatusError(
                f"controller {base} answered {exc.code} for {path}: an operator token is needed off loopback "
                "(--token-file, from `fleetguard controller token --operator`)"
            ) from exc
        raise StatusError(f"controller {base} answered {exc.code} for {path}: {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusError(
            f"cannot reach {base}: {reason} (is `fleetguard controller` or `up` running?)"
        ) from exc
    if kind != "application/json":
        raise StatusError(NOT_READ_API.format(base=base, why=f"{path} answered {kind}, not JSON"))
    try:
        return json.loads(body)
    except ValueError as exc:
        raise StatusError(NOT_READ_API.format(base=base, why=f"{path} is not JSON")) from exc


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
    fleet = _get(base, "/v1/fleet", token)
    hosts = _get(base, "/v1/hosts", token)
    if (
        not isinstance(fleet, dict)
        or "hosts" not in fleet
        or not isinstance(hosts, dict)
        or "hosts" not in hosts
    ):
        raise StatusError(NOT_READ_API.format(base=base, why="/v1/fleet is not a fleet"))
    return {
        "fleet": fleet,
        "hosts": hosts["hosts"],
        "findings": _get(base, f"/v1/findings?since={time.time() - 3600:.0f}&limit=200", token)["findings"],
    }


def _when(ts: object) -> str:
    if not isinstance(ts, int | float):
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    widths[-1] = 0  # the last column (a reason, a summary) is not padded
    line = "  ".join(f"{{:{w}s}}" for w in widths)
    return ["  " + line.format(*header).rstrip()] + ["  " + line.format(*r).rstrip() for r in rows]


def render_status(status: dict[str, Any]) -> str:
    """For a person: the summary lines, then hosts by health, the worst open incidents and at-risk GPUs."""
    fleet = status["fleet"]
    hosts: list[dict[str, Any]] = status["hosts"]
    health = fleet.get("health") or {}
    states = ", ".join(f"{health.get(s, 0)} {s}" for s in ("failed", "silent", "degraded", "healthy"))
    lines = [f"fleet     {fleet['hosts']} hosts ({states}), {fleet['gpus']} GPUs, {fleet['jobs']} jobs"]
    by_sev = fleet.get("open_incidents_by_severity") or {}
    sev_text = ", ".join(f"{by_sev[s]} {s}" for s in ("critical", "warning", "info") if by_sev.get(s))
    lines.append(f"incidents {fleet.get('open_incidents', 0)} open" + (f" ({sev_text})" if sev_text else ""))
    breaker = fleet.get("breaker") or {}
    if breaker.get("tripped"):
        lines.append(
            f"breaker   OPEN since {_when(breaker.get('since_ts'))}: {breaker.get('reason', '')} "
            "(repairs held; `fleetguard breaker reset` after looking)"
        )
    else:
        room = breaker.get("headroom")
        near = (
            f" ({room.get('hosts_acted')} of {room.get('fleet_hosts')} hosts acted on in "
            f"{float(room.get('window_seconds') or 0):g} s; it opens at {room.get('trips_at_hosts')})"
            if isinstance(room, dict)
            else ""
        )
        lines.append(f"breaker   closed: repairs go ahead{near}")
    ingest = fleet.get("ingest") or {}
    if ingest:
        lines.append(
            f"ingest    lag {ingest.get('lag_seconds', 0.0):.1f} s, newest commit "
            f"{_ago(ingest.get('newest_commit_age_seconds'))} ago, "
            f"{ingest.get('queue_batches', 0)} batches queued"
        )
        held = ingest.get("held_hosts") or []
        if held:
            count = int(ingest.get("held_hosts_count") or len(held))
            rest = f" and {count - len(held)} more" if count > len(held) else ""
            hosts_word = "host" if count == 1 else "hosts"
            lines.append(
                f"held      {count} {hosts_word} whose batches the store refused (set aside in the "
                f"controller's journal; their batches wait): {', '.join(map(str, held))}{rest}"
            )
    lines.append(f"findings  {fleet['open_findings']} in the last hour, {fleet['at_risk_gpus']} at-risk GPUs")
    if hosts:
        lines += ["", "hosts, worst first:"]
        rows = [
            (
                str(h["host"]),
                str(h.get("health", "silent" if h.get("silent") else "?")),
                str(h.get("open_incidents", "-")),
                _ago(h.get("last_seen_seconds_ago")),
                str(h.get("reason", "")) or "-",
            )
            for h in hosts[:HOSTS_SHOWN]
        ]
        lines += _table(("HOST", "HEALTH", "OPEN", "HEARD", "REASON"), rows)
        if len(hosts) > HOSTS_SHOWN:
            lines.append(f"  ... and {len(hosts) - HOSTS_SHOWN} more (--json lists all)")
    worst = fleet.get("worst_incidents") or []
    if worst:
        lines += ["", "worst open incidents:"]
        rows = [
            (
                str(i["severity"]),
                str(i["host"]),
                f"{i['component_kind']} {i['component_id']}",
                _when(i.get("opened_ts")),
                str(i["summary"]),
            )
            for i in worst
        ]
        lines += _table(("SEVERITY", "HOST", "COMPONENT", "OPENED", "SUMMARY"), rows)
        more = int(fleet.get("open_incidents", 0)) - len(worst)
        if more > 0:
            lines.append(f"  ... and {more} more (fleetguard dashboard: /incidents)")
    at_risk = fleet.get("at_risk")
    if at_risk is None:  # an older controller: from the findings
        at_risk = [f for f in status.get("findings", []) if f.get("kind") == "at_risk_gpu"][:10]
    if at_risk:
        lines += ["", "at-risk GPUs:"]
        risky = [
            (
                str(f.get("host") or "-"),
                str(f.get("gpu_uuid") or "-"),
                str(f.get("job_id") or "-"),
                str(f["summary"]),
            )
            for f in at_risk
        ]
        lines += _table(("HOST", "GPU", "JOB", "SUMMARY"), risky)
    return "\n".join(lines) + "\n"
