"""The read API's answers (GET /v1/...): plain functions of a DuckDB cursor and the hosts' state, returning
JSON-able dicts. The shapes are documented in docs/controller.md; the dashboard and `fleetguard status` read
them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import duckdb

from diagnosis.health import SEVERITY_ORDER, Health, OpenIncident, Verdict, host_verdicts, rank
from fleetguard.controller.hosts import HostState, to_json
from fleetguard.incidents.incident_store import breaker_document
from fleetguard.records.evidence import api_document
from fleetguard.store import open_incidents

RECENT_SECONDS = 3600.0  # "open" findings: raised within this (incidents are open until resolved)
JOB_SECONDS = 600.0  # a job is listed while one of its ranks sent a heartbeat within this
MAX_LIMIT = 10_000
WORST_LISTED = 10  # open incidents and at-risk GPUs listed in /v1/fleet (the counts cover all)


def _rows(cur: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    result = cur.execute(sql, params)
    names = [d[0] for d in result.description or []]
    return [dict(zip(names, (_plain(v) for v in row), strict=True)) for row in result.fetchall()]


def _plain(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# Epoch seconds -> TIMESTAMP (UTC) as the store writes them: no time zone involved.
_AT = "make_timestamp(CAST(round(? * 1000000) AS BIGINT))"


def _since(seconds: float) -> str:
    return f"make_timestamp(CAST(round((? - {seconds}) * 1000000) AS BIGINT))"


def fleet(
    cur: duckdb.DuckDBPyConnection,
    hosts: list[HostState],
    now: float,
    silent_after: float,
    *,
    queue_batches: int = 0,
    held_hosts: Sequence[str] = (),
) -> dict[str, Any]:
    """The fleet at a glance, with the one health model's verdict per host (diagnosis.health): the counts
    `fleetguard status` prints, the worst open incidents, the breaker, the at-risk GPUs with their jobs and
    how far ingest is behind."""
    counts = cur.execute(
        "SELECT count(*) FILTER (WHERE kind <> 'at_risk_gpu'), "
        "count(DISTINCT gpu_uuid) FILTER (WHERE kind = 'at_risk_gpu') "
        f"FROM findings WHERE ts >= {_since(RECENT_SECONDS)}",
        [now],
    ).fetchone()
    jobs = cur.execute(
        f"SELECT count(DISTINCT job_id) FROM heartbeats WHERE ts >= {_since(JOB_SECONDS)}", [now]
    ).fetchone()
    incidents = open_incidents(cur)
    verdicts = _verdicts(hosts, incidents, now, silent_after)
    live = [h for h in hosts if not h.is_silent(now, silent_after)]
    by_severity = {"critical": 0, "warning": 0, "info": 0}
    for incident in incidents:
        by_severity[incident.severity.value] = by_severity.get(incident.severity.value, 0) + 1
    return {
        "generated_ts": now,
        "hosts": len(hosts),
        "hosts_silent": sum(1 for h in hosts if h.is_silent(now, silent_after)),
        "gpus": sum(h.gpus for h in hosts),
        "open_findings": int(counts[0]) if counts else 0,
        "at_risk_gpus": int(counts[1]) if counts else 0,
        "jobs": int(jobs[0]) if jobs else 0,
        "health": {
            state.value: sum(1 for v in verdicts.values() if v.health is state) for state in SEVERITY_ORDER
        },
        "open_incidents": len(incidents),
        "open_incidents_by_severity": by_severity,
        "worst_incidents": [_incident(i) for i in incidents[:WORST_LISTED]],
        "breaker": breaker(cur),
        "at_risk": at_risk(cur, now),
        "ingest": {
            # The agent's send to the controller's commit of each live host's newest batch (clock skew
            # between the two included), and the batches waiting for the writer.
            "lag_seconds": max((max(0.0, h.last_seen - h.last_sent) for h in live), default=0.0),
            "newest_commit_age_seconds": min((now - h.last_seen for h in hosts), default=None),
            "queue_batches": queue_batches,
            # Hosts whose batches wait (503 `held`): the store refused too many of theirs, set aside in the
            # journal (IngestWriter.held_hosts); named up to WORST_LISTED, all counted.
            "held_hosts": list(held_hosts[:WORST_LISTED]),
            "held_hosts_count": len(held_hosts),
        },
    }


def host_health(
    cur: duckdb.DuckDBPyConnection, hosts: list[HostState], now: float, silent_after: float
) -> dict[str, Health]:
    """Each host's state in the one health model, for /metrics."""
    return {h: v.health for h, v in _verdicts(hosts, open_incidents(cur), now, silent_after).items()}


def _verdicts(
    hosts: list[HostState], incidents: list[OpenIncident], now: float, silent_after: float
) -> dict[str, Verdict]:
    liveness = {h.host: h.liveness(now, silent_after) for h in hosts}
    known = set(liveness)
    # A host this controller never heard from (an incident left from another store) is not one of its hosts.
    return host_verdicts(liveness, [i for i in incidents if i.host in known])


def _incident(incident: OpenIncident) -> dict[str, Any]:
    return {
        "incident_id": incident.incident_id,
        "host": incident.host,
        "component_kind": incident.component_kind,
        "component_id": incident.component_id,
        "severity": incident.severity.value,
        "summary": incident.summary,
        "opened_ts": incident.opened_at,
    }


def breaker(cur: duckdb.DuckDBPyConnection) -> dict[str, object]:
    """The repair breaker: open (tripped) or closed, since when, what tripped it, and how near it was."""
    return breaker_document(cur)


def at_risk(cur: duckdb.DuckDBPyConnection, now: float) -> list[dict[str, Any]]:
    """The GPUs found at risk within the hour, riskiest first, each with the job using it when known."""
    return _rows(
        cur,
        "SELECT host, gpu_uuid, job_id, summary, epoch(ts) AS ts FROM findings "
        f"WHERE kind = 'at_risk_gpu' AND ts >= {_since(RECENT_SECONDS)} "
        "QUALIFY row_number() OVER (PARTITION BY gpu_uuid ORDER BY ts DESC) = 1 "
        f"ORDER BY ts DESC LIMIT {WORST_LISTED}",
        [now],
    )


def host_list(
    cur: duckdb.DuckDBPyConnection,
    hosts: list[HostState],
    now: float,
    silent_after: float,
    *,
    boot_ids: bool = True,
) -> dict[str, Any]:
    """Every host with its health and reason, the worst first (failed, silent, degraded, healthy)."""
    incidents = open_incidents(cur)
    verdicts = _verdicts(hosts, incidents, now, silent_after)
    counts: dict[str, int] = {}
    for incident in incidents:
        counts[incident.host] = counts.get(incident.host, 0) + 1
    docs = [
        _host(h, now, silent_after, boot_ids, verdicts[h.host], counts.get(h.host, 0))
        for h in sorted(hosts, key=lambda h: (rank(verdicts[h.host].health), h.host))
    ]
    return {"hosts": docs}


def _host(
    state: HostState,
    now: float,
    silent_after: float,
    boot_ids: bool,
    verdict: Verdict | None = None,
    incidents: int = 0,
) -> dict[str, object]:
    """A host's state; its boot id only for operators: with a host's boot id, another host could forge the
    message ids of that host's batches (see fleetguard.shipping.nats_subjects.msg_id)."""
    doc = to_json(state, now, silent_after)
    if not boot_ids:
        doc.pop("boot_id", None)
    if verdict is not None:
        doc["health"] = verdict.health.value
        doc["reason"] = verdict.reason
        doc["open_incidents"] = incidents
    return doc


_GPU_FIELDS = (
    "gpu_index, uuid, name, epoch(ts) AS ts, utilization_gpu_percent, memory_used_bytes, memory_total_bytes, "
    "temperature_celsius, power_watts, sm_clock_mhz, clocks_event_reasons, ecc_corrected_volatile, "
    "ecc_uncorrected_volatile, remapped_rows_pending, remapped_rows_failure, pcie_replay_errors, "
    "nvlink_crc_flit_errors"
)


def host_detail(
    cur: duckdb.DuckDBPyConnection,
    state: HostState,
    now: float,
    silent_after: float,
    *,
    boot_ids: bool = True,
) -> dict[str, Any]:
    # Only the last few intervals are scanned: the zone maps on ts skip everything older.
    window = max(60.0, 10 * state.interval_seconds)
    since = state.last_seen - window
    gpus = _rows(
        cur,
        f"SELECT {_GPU_FIELDS} FROM gpu_samples WHERE host = ? AND ts >= {_AT} "
        "QUALIFY row_number() OVER (PARTITION BY gpu_index ORDER BY ts DESC) = 1 ORDER BY gpu_index",
        [state.host, since],
    )
    nics = _rows(
        cur,
        "SELECT device, port, state, phys_state, rate_gbps, link_layer, epoch(ts) AS ts FROM nic_samples "
        f"WHERE host = ? AND ts >= {_AT} - INTERVAL 1 HOUR "
        "QUALIFY row_number() OVER (PARTITION BY device, port ORDER BY ts DESC) = 1 ORDER BY device, port",
        [state.host, since],
    )
    events = _rows(
        cur,
        "SELECT epoch(ts) AS ts, kind, source, code, gpu_index, device, message, count FROM events "
        "WHERE host = ? ORDER BY ts DESC LIMIT 50",
        [state.host],
    )
    incidents = [i for i in open_incidents(cur) if i.host == state.host]
    verdict = host_verdicts({state.host: state.liveness(now, silent_after)}, incidents)[state.host]
    return {
        "host": _host(state, now, silent_after, boot_ids, verdict, len(incidents)),
        "open_incidents": [_incident(i) for i in incidents],
        "gpus": gpus,
        "nics": nics,
        "events": events,
        "findings": findings(cur, now - RECENT_SECONDS, 50, host=state.host, boot_ids=boot_ids)["findings"],
    }


def jobs(cur: duckdb.DuckDBPyConnection, now: float) -> dict[str, Any]:
    rows = _rows(
        cur,
        "SELECT job_id, list(DISTINCT host ORDER BY host) AS hosts, count(DISTINCT rank) AS ranks, "
        "max(world_size) AS world_size, max(step) AS max_step, epoch(max(ts)) AS last_heartbeat_ts, "
        "count(DISTINCT rank) FILTER (WHERE status = 'error') AS ranks_in_error "
        f"FROM heartbeats WHERE ts >= {_since(JOB_SECONDS)} GROUP BY job_id ORDER BY job_id",
        [now],
    )
    return {"jobs": rows}


def findings(
    cur: duckdb.DuckDBPyConnection,
    since: float,
    limit: int,
    host: str | None = None,
    *,
    boot_ids: bool = True,
) -> dict[str, Any]:
    where, params = f"ts >= {_AT}", list[object]([since])
    if host is not None:
        where, params = where + " AND host = ?", [since, host]
    rows = _rows(
        cur,
        "SELECT epoch(ts) AS ts, finding_id, kind, severity, subject, summary, host, job_id, rank, gpu_uuid, "
        f"evidence_json FROM findings WHERE {where} ORDER BY ts DESC LIMIT {min(max(limit, 1), MAX_LIMIT)}",
        list(params),
    )
    for row in rows:
        text = row.pop("evidence_json")
        row["evidence"] = api_document(text if isinstance(text, str) else None)
        if not boot_ids:
            row["evidence"].pop("boot_id", None)  # host_silent's: for operators only, as in host_list
    return {"findings": rows}


def commands(cur: duckdb.DuckDBPyConnection, host: str | None, limit: int) -> dict[str, Any]:
    where, params = ("WHERE host = ?", [host]) if host else ("", [])
    rows = _rows(
        cur,
        "SELECT command_id, host, kind, job_id, reason, epoch(created_ts) AS created_ts, deliveries, "
        "epoch(last_delivered_ts) AS last_delivered_ts, epoch(acked_ts) AS acked_ts, outcome, detail "
        f"FROM host_commands {where} ORDER BY created_ts DESC LIMIT {min(max(limit, 1), MAX_LIMIT)}",
        params,
    )
    return {"commands": rows}
