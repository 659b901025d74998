"""The DuckDB store: schema mirroring the records, versioned migrations, batched writes, retention, export.

The package loads DuckDB only when `Store` (or its errors) is first asked for: the schema module and the
record types are also what an agent that ships to a controller needs, and that agent keeps no DuckDB."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetguard.store.unstorable import UnstorableRows

if TYPE_CHECKING:
    from fleetguard.store.health_inputs import HostSeen, hosts_seen, open_incidents
    from fleetguard.store.migrations import schema_behind
    from fleetguard.store.repair_tables import FaultRepairs, OutNode, nodes_out, repair_summary
    from fleetguard.store.store import Store, StoreError, StoreLocked

__all__ = [
    "FaultRepairs",
    "HostSeen",
    "OutNode",
    "Store",
    "StoreError",
    "StoreLocked",
    "UnstorableRows",
    "hosts_seen",
    "nodes_out",
    "open_incidents",
    "repair_summary",
    "schema_behind",
]

_LAZY = frozenset({"Store", "StoreError", "StoreLocked"})
# Read by the dashboard, which reaches the store through this package only.
_LAZY_REPAIRS = frozenset({"FaultRepairs", "OutNode", "nodes_out", "repair_summary"})
# The health model's inputs (open incidents, hosts' liveness): read by the read API and the dashboard alike.
_HEALTH = frozenset({"HostSeen", "hosts_seen", "open_incidents"})
_SCHEMA = frozenset({"schema_behind"})  # a reader of an older store says why its queries fail


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from fleetguard.store import store

        return getattr(store, name)
    if name in _LAZY_REPAIRS:
        from fleetguard.store import repair_tables

        return getattr(repair_tables, name)
    if name in _HEALTH:
        from fleetguard.store import health_inputs

        return getattr(health_inputs, name)
    if name in _SCHEMA:
        from fleetguard.store import migrations

        return getattr(migrations, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
