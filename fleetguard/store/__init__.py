"""The DuckDB store: schema mirroring the records, versioned migrations, batched writes, retention, export."""

from fleetguard.store.store import Store, StoreError, StoreLocked
from fleetguard.store.unstorable import UnstorableRows

__all__ = ["Store", "StoreError", "StoreLocked", "UnstorableRows"]
