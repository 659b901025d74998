"""The DuckDB store: schema mirroring the records, versioned migrations, batched writes, retention, export."""

from fleetguard.store.store import Store, StoreError, StoreLocked

__all__ = ["Store", "StoreError", "StoreLocked"]
