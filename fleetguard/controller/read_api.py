"""The read API's answers (GET /v1/...): plain functions of a DuckDB cursor and the hosts' state, returning
JSON-able dicts. The shapes are documented in docs/controller.md; the dashboard and `fleetguard status` read
them."""

from __future__ import annotations

import json
import math
from typing import Any

import duckdb

from fleetguard.controller.hosts import HostState, to_json

RECENT_SECONDS = 3600.0  # "open" findings: raised within this (incidents bring open/resolved later)
JOB_SECONDS = 600.0  # a job is listed while one of its ranks sent a heartbeat within this
MAX_LIMIT = 10_000


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
    cur: duckdb.DuckDBPyConnection, hosts: list[HostState], now: float, silent_after: float
) -> dict[str, Any]:
    counts = cur.execute(
        "SELECT count(*) FILTER (WHERE kind <> 'at_risk_gpu'), "
        "count(DISTINCT gpu_uuid) FILTER (WHERE kind = 'at_risk_gpu') "
        f"FROM findings WHERE ts >= {_since(RECENT_SECONDS)}",
        [now],
    ).fetchone()
    jobs = cur.execute(
        f"SELECT count(DISTINCT job_id) FROM heartbeats WHERE ts >= {_since(JOB_SECONDS)}", [now]
    ).fetchone()
    return {
        "generated_ts": now,
        "hosts": len(hosts),
        "hosts_silent": sum(1 for h in hosts if h.is_silent(now, silent_after)),
        "gpus": sum(h.gpus for h in hosts),
        "open_findings": int(counts[0]) if counts else 0,
        "at_risk_gpus": int(counts[1]) if counts else 0,
        "jobs": int(jobs[0]) if jobs else 0,
    }


def host_list(
    hosts: list[HostState], now: float, silent_after: float, *, boot_ids: bool = True
) -> dict[str, Any]:
    return {"hosts": [_host(h, now, silent_after, boot_ids) for h in sorted(hosts, key=lambda h: h.host)]}


def _host(state: HostState, now: float, silent_after: float, boot_ids: bool) -> dict[str, object]:
    """A host's state; its boot id only for operators: with a host's boot id, another host could forge the
    message ids of that host's batches (see fleetguard.shipping.nats_subjects.msg_id)."""
    doc = to_json(state, now, silent_after)
    if not boot_ids:
        doc.pop("boot_id", None)
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
    return {
        "host": _host(state, now, silent_after, boot_ids),
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
        try:
            row["evidence"] = json.loads(text) if isinstance(text, str) else {}
        except ValueError:
            row["evidence"] = {"text": text}
        if not boot_ids and isinstance(row["evidence"], dict):
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
