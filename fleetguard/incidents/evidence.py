"""Evidence captured when an incident opens, before any action can wipe it: the observations that opened
it, the component's recent samples, the host's events and kernel-log lines, and the job's runtime state."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict

import duckdb

from diagnosis.incident import Incident, IncidentChange
from diagnosis.model import ComponentKind
from fleetguard.incidents.incident_store import EvidenceRow
from fleetguard.store.incident_tables import epoch_sql, ts_sql
from fleetguard.store.ingest_order import ORDERED_TABLES, SEQ_COLUMN

BEFORE_SECONDS = 600.0  # how far back from the first sighting the evidence reaches
MAX_ROWS = 100  # per kind of evidence: an incident's evidence is bounded whatever the storm


def capture(con: duckdb.DuckDBPyConnection, change: IncidentChange, now: float) -> list[EvidenceRow]:
    incident = change.incident
    rows = [
        EvidenceRow(incident.incident_id, o.ts, "observation", _plain(asdict(o)))
        for o in change.evidence[:MAX_ROWS]
    ]
    try:
        rows.extend(_from_store(con, incident, now))
    except duckdb.Error as exc:  # a store of another shape: keep what we have, say why
        rows.append(EvidenceRow(incident.incident_id, now, "error", {"error": str(exc)[:500]}))
    return rows


def _plain(values: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, value in values.items():
        if isinstance(value, dict):
            out[name] = _plain(value)
        else:
            out[name] = value.value if hasattr(value, "value") else value
    return out


def _from_store(con: duckdb.DuckDBPyConnection, incident: Incident, now: float) -> Iterator[EvidenceRow]:
    key = incident.key
    since = incident.first_seen - BEFORE_SECONDS
    window = [key.host, since, now]
    where = f"host = ? AND ts BETWEEN {ts_sql()} AND {ts_sql()}"
    if key.component_kind is ComponentKind.GPU:
        yield from _rows(
            con, incident, "gpu_sample", "gpu_samples", f"{where} AND uuid = ?", [*window, key.component_id]
        )
    if key.component_kind is ComponentKind.PORT:
        device, _, port = key.component_id.partition("/")
        yield from _rows(
            con,
            incident,
            "nic_counter",
            "nic_counters",
            f"{where} AND device = ? AND port = ? AND coalesce(delta, 0) > 0",
            [*window, device, int(port) if port.isdigit() else -1],
        )
    yield from _rows(
        con, incident, "kernel_log", "events", f"{where} AND source IN ('kmsg', 'simulated')", window
    )
    yield from _rows(
        con, incident, "event", "events", f"{where} AND source NOT IN ('kmsg', 'simulated')", window
    )
    if key.component_kind is ComponentKind.JOB:
        job = [key.component_id, since, now]
        job_where = f"job_id = ? AND ts BETWEEN {ts_sql()} AND {ts_sql()}"
        yield from _rows(con, incident, "finding", "findings", job_where, job)
        yield from _rows(con, incident, "heartbeat", "heartbeats", job_where, job)


def _rows(
    con: duckdb.DuckDBPyConnection,
    incident: Incident,
    kind: str,
    table: str,
    where: str,
    params: Sequence[object],
) -> Iterator[EvidenceRow]:
    """The latest MAX_ROWS rows of `table` matching `where`, oldest first."""
    # The store's ingest order is its bookkeeping, not evidence.
    hidden = f"ts, {SEQ_COLUMN}" if table in ORDERED_TABLES else "ts"
    cursor = con.execute(
        f"SELECT {epoch_sql('ts')} AS ts_epoch, * EXCLUDE ({hidden}) FROM {table} WHERE {where} "
        f"ORDER BY ts DESC LIMIT {MAX_ROWS}",
        list(params),
    )
    names = [d[0] for d in cursor.description or ()]
    for row in reversed(cursor.fetchall()):
        detail = dict(zip(names, row, strict=True))
        ts = float(detail.pop("ts_epoch"))
        yield EvidenceRow(incident.incident_id, ts, kind, detail)
