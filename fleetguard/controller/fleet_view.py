"""`fleetguard status --fleet URL1,URL2`: each controller's read API, merged into one fleet summary.

A host is counted once even if two controllers know it (it moved pools): the one that heard from it last
wins. A controller that cannot be read is named in the output, and the rest is still shown; only when none
can be read is it an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetguard.controller.status_view import StatusError, fetch_status, render_status

MAX_CONTROLLERS = 256

Fetch = Callable[[str, Path | None], dict[str, Any]]


@dataclass(frozen=True)
class ControllerReading:
    url: str
    status: dict[str, Any] | None
    error: str = ""


def split_fleet(urls: str) -> list[str]:
    parts = [u.strip() for u in urls.split(",") if u.strip()]
    if not parts:
        raise StatusError("--fleet: give controller URLs separated by commas")
    if len(parts) > MAX_CONTROLLERS:
        raise StatusError(f"--fleet: at most {MAX_CONTROLLERS} controllers")
    return list(dict.fromkeys(parts))


def read_fleet(
    urls: list[str], token_file: Path | None, fetch: Fetch = fetch_status
) -> list[ControllerReading]:
    readings = []
    for url in urls:
        try:
            readings.append(ControllerReading(url, fetch(url, token_file)))
        except StatusError as exc:
            readings.append(ControllerReading(url, None, str(exc)))
    if all(r.status is None for r in readings):
        raise StatusError("no controller could be read: " + "; ".join(r.error for r in readings))
    return readings


def merge(readings: list[ControllerReading]) -> dict[str, Any]:
    """One status document (the shape of fetch_status) over every controller that answered."""
    hosts: dict[str, dict[str, Any]] = {}
    findings: list[dict[str, Any]] = []
    open_findings = at_risk = jobs = 0
    for reading in readings:
        if reading.status is None:
            continue
        fleet = reading.status["fleet"]
        open_findings += int(fleet["open_findings"])
        at_risk += int(fleet["at_risk_gpus"])
        jobs += int(fleet["jobs"])  # a job whose hosts span pools is counted by each controller
        for host in reading.status["hosts"]:
            doc = {**host, "controller": reading.url}
            old = hosts.get(host["host"])
            if old is None or float(host["last_seen"]) > float(old["last_seen"]):
                hosts[host["host"]] = doc
        findings.extend({**f, "controller": reading.url} for f in reading.status["findings"])
    findings.sort(key=lambda f: float(f.get("ts") or 0.0), reverse=True)
    merged_hosts = sorted(hosts.values(), key=lambda h: (rank_of(h), str(h["host"])))
    answered = [r.status["fleet"] for r in readings if r.status is not None]
    by_severity: dict[str, int] = {}
    for fleet in answered:
        for severity, n in (fleet.get("open_incidents_by_severity") or {}).items():
            by_severity[severity] = by_severity.get(severity, 0) + int(n)
    worst = sorted(
        (i for fleet in answered for i in fleet.get("worst_incidents") or []),
        key=lambda i: (_SEVERITY_RANK.get(str(i["severity"]), 1), float(i.get("opened_ts") or 0.0)),
    )
    tripped = [f["breaker"] for f in answered if (f.get("breaker") or {}).get("tripped")]
    return {
        "fleet": {
            "hosts": len(merged_hosts),
            "hosts_silent": sum(1 for h in merged_hosts if h["silent"]),
            "gpus": sum(int(h["gpus"]) for h in merged_hosts),
            "jobs": jobs,
            "open_findings": open_findings,
            "at_risk_gpus": at_risk,
            "health": {
                state: sum(1 for h in merged_hosts if h.get("health") == state)
                for state in ("failed", "silent", "degraded", "healthy")
            },
            "open_incidents": sum(int(f.get("open_incidents", 0)) for f in answered),
            "open_incidents_by_severity": by_severity,
            "worst_incidents": worst[:10],
            # Each controller has its own breaker: the merged one is open when any is, with its reason.
            "breaker": tripped[0] if tripped else {"tripped": False, "since_ts": None, "reason": ""},
            "at_risk": [a for f in answered for a in f.get("at_risk") or []][:10],
        },
        "hosts": merged_hosts,
        "findings": findings,
        "controllers": [
            {"url": r.url, "ok": r.status is not None, "error": r.error}
            | ({"hosts": r.status["fleet"]["hosts"]} if r.status is not None else {})
            for r in readings
        ],
    }


_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
_HEALTH_RANK = {"failed": 0, "silent": 1, "degraded": 2, "healthy": 3}


def rank_of(host: dict[str, Any]) -> int:
    return _HEALTH_RANK.get(str(host.get("health")), 1 if host.get("silent") else 3)


def render_fleet(merged: dict[str, Any]) -> str:
    lines = []
    for c in merged["controllers"]:
        state = f"{c['hosts']} hosts" if c["ok"] else f"UNREACHABLE ({c['error']})"
        lines.append(f"controller {c['url']}: {state}")
    return "\n".join(lines) + "\n" + render_status(merged)


def fetch_fleet(urls: str, token_file: Path | None) -> dict[str, Any]:
    """Read every controller of `urls` (comma-separated) and merge; StatusError if none answers."""
    return merge(read_fleet(split_fleet(urls), token_file))
