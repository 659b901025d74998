"""`fleetguard status` for a person: hosts by health with the reason, the worst incidents, the breaker with
what tripped it, at-risk GPUs with their jobs; no dict reprs; an older controller's document still prints."""

from __future__ import annotations

from typing import Any

from fleetguard.controller.status_view import render_status


def _doc() -> dict[str, Any]:
    return {
        "fleet": {
            "hosts": 3,
            "hosts_silent": 1,
            "gpus": 16,
            "jobs": 1,
            "open_findings": 4,
            "at_risk_gpus": 1,
            "health": {"failed": 1, "silent": 1, "degraded": 0, "healthy": 1},
            "open_incidents": 19,
            "open_incidents_by_severity": {"critical": 1, "warning": 18, "info": 0},
            "worst_incidents": [
                {
                    "incident_id": "i1",
                    "host": "node-2",
                    "component_kind": "gpu",
                    "component_id": "GPU-aa",
                    "severity": "critical",
                    "summary": "XID 48 double-bit ECC",
                    "opened_ts": 1795409000.0,
                }
            ],
            "breaker": {"tripped": True, "since_ts": 1795409100.0, "reason": "5 repairs in 10 min"},
            "at_risk": [
                {
                    "host": "node-3",
                    "gpu_uuid": "GPU-cc",
                    "job_id": "llm-7b",
                    "summary": "risk 0.91",
                    "ts": 1.0,
                }
            ],
            "ingest": {"lag_seconds": 0.25, "newest_commit_age_seconds": 0.5, "queue_batches": 0},
        },
        "hosts": [
            {
                "host": "node-2",
                "health": "failed",
                "reason": "XID 48 double-bit ECC (+2 more)",
                "open_incidents": 3,
                "last_seen_seconds_ago": 1.0,
                "silent": False,
            },
            {
                "host": "node-9",
                "health": "silent",
                "reason": "no data for 300 s",
                "open_incidents": 0,
                "last_seen_seconds_ago": 300.0,
                "silent": True,
            },
            {
                "host": "node-3",
                "health": "healthy",
                "reason": "",
                "open_incidents": 0,
                "last_seen_seconds_ago": 1.0,
                "silent": False,
            },
        ],
        "findings": [],
    }


def test_a_person_reads_hosts_incidents_breaker_and_at_risk_gpus() -> None:
    text = render_status(_doc())
    assert "3 hosts (1 failed, 1 silent, 0 degraded, 1 healthy)" in text
    assert "incidents 19 open (1 critical, 18 warning)" in text
    assert "breaker   OPEN since 2026-11-23 04:45:00 UTC" in text and "5 repairs in 10 min" in text
    lines = text.splitlines()
    failed = next(line for line in lines if line.strip().startswith("node-2"))
    assert "failed" in failed and "XID 48 double-bit ECC (+2 more)" in failed
    silent = next(line for line in lines if line.strip().startswith("node-9"))
    assert "silent" in silent and "5 min" in silent
    assert any("critical" in line and "GPU-aa" in line and "XID 48" in line for line in lines)
    assert any("node-3" in line and "llm-7b" in line and "risk 0.91" in line for line in lines)
    assert "... and 18 more" in text
    assert "{" not in text and "[" not in text


def test_an_older_controllers_document_still_prints() -> None:
    doc = _doc()
    for key in (
        "health",
        "open_incidents",
        "open_incidents_by_severity",
        "worst_incidents",
        "breaker",
        "at_risk",
        "ingest",
    ):
        del doc["fleet"][key]
    for host in doc["hosts"]:
        del host["health"], host["reason"], host["open_incidents"]
    text = render_status(doc)
    assert "3 hosts" in text and "breaker   closed" in text
    assert "node-9" in text and "silent" in text.split("node-9", 1)[1].splitlines()[0]


def test_a_closed_breaker_says_how_near_it_is() -> None:
    doc = _doc()
    doc["fleet"]["breaker"] = {
        "tripped": False,
        "since_ts": None,
        "reason": "",
        "headroom": {
            "fleet_hosts": 40,
            "hosts_acted": 3,
            "window_seconds": 300.0,
            "trips_at_hosts": 21,
            "repairs_last_hour": 3,
            "repairs_per_hour": 4,
            "as_of_ts": 1795409100.0,
        },
    }
    text = render_status(doc)
    assert "breaker   closed: repairs go ahead (3 of 40 hosts acted on in 300 s; it opens at 21)" in text
