"""The controller's store-side analysis inside `fleetguard up` (one process, one store): 1-minute and 1-hour
rollups of the last minutes and fleet correlation, on a maintenance thread beside the agent. `up`'s agent
stays the store's writer; the ingest path (ledger, tokens) is for agents that ship to a controller."""

from __future__ import annotations

import duckdb

from fleetguard.agent.agent import Agent
from fleetguard.agent.daemon import Extension
from fleetguard.config import Config
from fleetguard.controller.analysis import CORRELATION_SECONDS
from fleetguard.controller.correlation import FleetCorrelation
from fleetguard.controller.maintenance import Maintenance
from fleetguard.controller.rollups import ROLLUP_SECONDS, Rollups
from fleetguard.store import Store

# Rows reach the store within a flush interval; the last few minutes are recomputed at every run.
RECENT_MINUTES = 3


class RecentRollups:
    """The rollup task for a store written directly: the minutes around `now` are the ones that changed."""

    def __init__(self) -> None:
        self.rollups = Rollups()

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        minute = int(now // 60)
        self.rollups.touch_minutes(range(minute - RECENT_MINUTES, minute + 1))
        self.rollups(con, now)


def controller_extension(config: Config) -> Extension:
    parts: dict[str, Maintenance] = {}

    def start(agent: Agent, store: Store) -> None:
        maintenance = Maintenance(store, agent.clock)
        maintenance.every(ROLLUP_SECONDS, "rollups", RecentRollups())
        ctl = config.controller
        correlation = FleetCorrelation(ctl.correlation_window_seconds, ctl.correlation_min_hosts)
        maintenance.every(CORRELATION_SECONDS, "fleet correlation", correlation)
        maintenance.start()
        parts["maintenance"] = maintenance

    def stop() -> None:
        maintenance = parts.pop("maintenance", None)
        if maintenance is not None:
            maintenance.stop()

    return Extension("rollups and fleet correlation", start, stop)
