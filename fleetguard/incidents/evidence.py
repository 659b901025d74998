"""Evidence captured when an incident opens, before any action can wipe it: the observations that opened
it, the component's recent samples, the host's events and kernel-log lines, and the job's runtime state.

The incidents a round opens are captured together: one query per kind of evidence for all of them (each
incident's rows picked by a join on what names it), not one per incident and kind; a storm that opens
dozens of incidents in a round costs a handful of queries, each scanning the window once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import duckdb

from diagnosis.incident import Incident, IncidentChange
from diagnosis.model import ComponentKind
from fleetguard.incidents.incident_store import EvidenceRow
from fleetguard.store.incident_tables import epoch_sql, ts_sql
from fleetguard.store.ingest_order import ORDERED_TABLES, SEQ_COLUMN

BEFORE_SECONDS = 600.0  # how far back from the first sighting the evidence reaches
MAX_ROWS = 100  # per kind of evidence: an incident's evidence is bounded whatever the storm
# The newest part of a window read first (`_rows`): MAX_ROWS rows of a component sampled every second.
RECENT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class _Kind:
    """One kind of evidence: the rows of `table` matching `match` (SQL over the table `t` and the wanted
    incident `w`: w.name, w.k1, w.k2 as `keys` gives them) within the incident's window."""

    kind: str
    table: str
    match: str
    by_job: bool = False  # the window's rows are the job's, not the host's


_GPU = _Kind("gpu_sample", "gpu_samples", "t.uuid = w.k1")
_PORT = _Kind("nic_counter", "nic_counters", "t.device = w.k1 AND t.port = w.k2 AND coalesce(t.delta, 0) > 0")
_KERNEL = _Kind("kernel_log", "events", "t.source IN ('kmsg', 'simulated')")
_EVENT = _Kind("event", "events", "t.source NOT IN ('kmsg', 'simulated')")
_FINDING = _Kind("finding", "findings", "true", by_job=True)
_HEARTBEAT = _Kind("heartbeat", "heartbeats", "true", by_job=True)
_ORDER = (_GPU, _PORT, _KERNEL, _EVENT, _FINDING, _HEARTBEAT)  # each incident's evidence, in this order


def capture(con: duckdb.DuckDBPyConnection, change: IncidentChange, now: float) -> list[EvidenceRow]:
    return capture_many(con, [change], now)


def capture_many(
    con: duckdb.DuckDBPyConnection, changes: Sequence[IncidentChange], now: float
) -> list[EvidenceRow]:
    """The evidence of each change's incident, incident after incident, each in `_ORDER`. A kind the store
    cannot answer (a store of another shape) ends that incident's evidence with a row saying why."""
    found: dict[str, list[EvidenceRow]] = {}
    failed: dict[str, str] = {}
    for change in changes:
        incident = change.incident
        found[incident.incident_id] = [
            EvidenceRow(incident.incident_id, o.ts, "observation", _plain(asdict(o)))
            for o in change.evidence[:MAX_ROWS]
        ]
    for kind in _ORDER:
        wanted = [
            c.incident for c in changes if c.incident.incident_id not in failed and _wants(kind, c.incident)
        ]
        if not wanted:
            continue
        try:
            for incident_id, row in _rows(con, kind, wanted, now):
                found[incident_id].append(row)
        except duckdb.Error as exc:
            for incident in wanted:
                failed[incident.incident_id] = str(exc)[:500]
    out: list[EvidenceRow] = []
    for incident_id, rows in found.items():
        out += rows
        if incident_id in failed:
            out.append(EvidenceRow(incident_id, now, "error", {"error": failed[incident_id]}))
    return out


def _wants(kind: _Kind, incident: Incident) -> bool:
    component = incident.key.component_kind
    if kind is _GPU:
        return component is ComponentKind.GPU
    if kind is _PORT:
        return component is ComponentKind.PORT
    if kind.by_job:
        return component is ComponentKind.JOB
    return True


def _keys(kind: _Kind, incident: Incident) -> tuple[str, str, int]:
    """(who the window's rows belong to, k1, k2) for the join."""
    key = incident.key
    if kind is _PORT:
        device, _, port = key.component_id.partition("/")
        return key.host, device, int(port) if port.isdigit() else -1
    if kind.by_job:
        return key.component_id, "", 0
    return key.host, key.component_id, 0


def _plain(values: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, value in values.items():
        if isinstance(value, dict):
            out[name] = _plain(value)
        else:
            out[name] = value.value if hasattr(value, "value") else value
    return out


def _rows(
    con: duckdb.DuckDBPyConnection, kind: _Kind, incidents: list[Incident], now: float
) -> list[tuple[str, EvidenceRow]]:
    """Each incident's latest MAX_ROWS rows of the kind in its window, oldest first.

    Read newest part first: the last RECENT_SECONDS of every window, then the older part only for the
    incidents that it left short of MAX_ROWS. A GPU or port sampled every second has its latest 100 rows in
    the newest part, so the scan covers a fifth of the 10-minute window (the 1 Hz fleet's rows in it are
    what a round's capture costs); sparse kinds (events, findings) read both parts, each cheap. The result
    equals one query over the whole window: the newest part's latest rows come first, the older part's fill
    what is left."""
    since = [i.first_seen - BEFORE_SECONDS for i in incidents]
    cut = now - RECENT_SECONDS
    found = _query(con, kind, incidents, [max(s, cut) for s in since], [MAX_ROWS] * len(incidents), now)
    counts = [0] * len(incidents)
    for n, _ in found:
        counts[n] += 1
    short = [n for n in range(len(incidents)) if counts[n] < MAX_ROWS and since[n] < cut]
    older: list[tuple[int, EvidenceRow]] = []
    if short:
        part = _query(
            con,
            kind,
            [incidents[n] for n in short],
            [since[n] for n in short],
            [MAX_ROWS - counts[n] for n in short],
            cut,
            upper_open=True,
        )
        older = [(short[m], row) for m, row in part]
    by_incident: dict[int, list[EvidenceRow]] = {}
    for n, row in older + found:  # older first: each incident's rows stay oldest first
        by_incident.setdefault(n, []).append(row)
    return [(incidents[n].incident_id, row) for n in sorted(by_incident) for row in by_incident[n]]


def _query(
    con: duckdb.DuckDBPyConnection,
    kind: _Kind,
    incidents: list[Incident],
    since: list[float],
    limits: list[int],
    upper: float,
    *,
    upper_open: bool = False,
) -> list[tuple[int, EvidenceRow]]:
    """(index into `incidents`, row): each incident's latest `limits[n]` rows with since[n] <= ts <= upper
    (< upper with `upper_open`), oldest first."""
    keys = [_keys(kind, i) for i in incidents]
    owner = "job_id" if kind.by_job else "host"
    # The store's ingest order is its bookkeeping, not evidence.
    hidden = f"ts, {SEQ_COLUMN}" if kind.table in ORDERED_TABLES else "ts"
    below = "<" if upper_open else "<="
    cursor = con.execute(
        "WITH w AS (SELECT unnest(?::INTEGER[]) AS n, unnest(?::VARCHAR[]) AS owner, "
        "unnest(?::VARCHAR[]) AS k1, unnest(?::BIGINT[]) AS k2, unnest(?::DOUBLE[]) AS since, "
        "unnest(?::INTEGER[]) AS lim) "
        f"SELECT w.n AS w_n, w.lim AS w_lim, {epoch_sql('t.ts')} AS ts_epoch, t.* EXCLUDE ({hidden}) "
        f"FROM {kind.table} t JOIN w ON t.{owner} = w.owner "
        f"AND t.ts >= {ts_sql('w.since')} AND {kind.match} "
        # The union of the windows, as constants: the scan skips blocks outside it.
        f"WHERE t.ts >= {ts_sql()} AND t.ts {below} {ts_sql()} "
        "QUALIFY row_number() OVER (PARTITION BY w.n ORDER BY t.ts DESC) <= w_lim "
        "ORDER BY w.n, t.ts",
        [
            list(range(len(incidents))),
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            since,
            limits,
            min(since),
            upper,
        ],
    )
    names = [d[0] for d in cursor.description or ()]
    out = []
    for row in cursor.fetchall():
        detail = dict(zip(names, row, strict=True))
        n = detail.pop("w_n")
        detail.pop("w_lim")
        ts = float(detail.pop("ts_epoch"))
        out.append((n, EvidenceRow(incidents[n].incident_id, ts, kind.kind, detail)))
    return out
