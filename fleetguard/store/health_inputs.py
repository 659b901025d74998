"""What the one health model (`diagnosis.health`) reads from a store: the open incidents and when each host
was last heard. Part of the store API, so the read API of `fleetguard controller` and `up` and the dashboard
read the same rows the same way (and decide the same health from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from diagnosis.health import OpenIncident, severity_of

if TYPE_CHECKING:
    import duckdb

# Open incidents are few (one per fault, not per line); this bounds a store flooded by a bad policy.
MAX_OPEN_INCIDENTS: Final = 10_000

_OPEN_SQL: Final = f"""
SELECT incident_id, host, component_kind, component_id, severity, summary, epoch(opened_at)
FROM incidents WHERE state IN ('open', 'acting')
ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, opened_at, incident_id
LIMIT {MAX_OPEN_INCIDENTS}
"""


def open_incidents(cur: duckdb.DuckDBPyConnection) -> list[OpenIncident]:
    """Every open or acting incident, worst first (critical, then the oldest)."""
    return [
        OpenIncident(
            incident_id=str(r[0]),
            host=str(r[1]),
            component_kind=str(r[2]),
            component_id=str(r[3]),
            severity=severity_of(str(r[4])),
            summary=str(r[5]),
            opened_at=float(r[6] or 0.0),
        )
        for r in cur.execute(_OPEN_SQL).fetchall()
    ]


@dataclass(frozen=True, slots=True)
class HostSeen:
    host: str
    last_seen: float  # epoch seconds, the controller's clock at the commit of its newest batch
    interval_seconds: float


def hosts_seen(cur: duckdb.DuckDBPyConnection) -> list[HostSeen]:
    """Every host that has shipped to this store's controller (`fleet_hosts`), by name."""
    rows = cur.execute(
        "SELECT host, epoch(last_seen), interval_seconds FROM fleet_hosts ORDER BY host"
    ).fetchall()
    return [HostSeen(str(r[0]), float(r[1]), float(r[2])) for r in rows]
