"""`fleetguard up`'s share of the controller: rollups of a store the agent writes directly."""

from __future__ import annotations

from fleetguard.clock import FakeClock
from fleetguard.controller.embedded_ext import RecentRollups
from fleetguard.records.telemetry import GpuSample
from fleetguard.store import Store

NOW = 1_795_000_050.0


def test_recent_minutes_are_rolled_up_from_rows_written_straight_to_the_store(store: Store) -> None:
    clock = FakeClock(NOW)
    store.append(
        [GpuSample(NOW - s, "h", 0, "GPU-0", utilization_gpu_percent=float(s)) for s in range(0, 100)]
    )
    task = RecentRollups()
    with store.transaction() as con:
        task(con, clock.time())
    rows = store.connection.execute("SELECT sum(samples) FROM gpu_rollup_1m").fetchone()
    assert rows == (100,)
    with store.transaction() as con:
        task(con, clock.time())  # again: recomputed, not doubled
    assert store.connection.execute("SELECT sum(samples) FROM gpu_rollup_1m").fetchone() == (100,)
