"""The fleet model (every GPU, port and host with its health) computed once per refresh period and shared by
every viewer of the fleet and network pages.

Building it reads every GPU's and port's newest rows and classifies 16,384 GPUs and ports in Python: about a
second on a 2,048-host fleet. A page should not wait for that, nor should ten open tabs do it ten times: the
first request builds it, later ones get the model at hand and, once it is older than the refresh period, a
background thread builds the next one (at most one at a time). What a page shows is then at most two refresh
periods old, as with any live refresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from dashboard.fleet_view import (
    GpuView,
    HostView,
    PortView,
    gpu_views,
    host_views,
    hosts_liveness,
    port_views,
)
from dashboard.queries.base import Cursor, tables
from dashboard.queries.events import EventCount, event_counts
from dashboard.queries.gpus import LIVE_WINDOW_SECONDS, latest_gpu_states
from dashboard.queries.network import port_counters, port_states
from dashboard.queries.predictions import risk_by_device
from diagnosis.health import Liveness, OpenIncident
from fleetguard.store import hosts_seen, open_incidents

log = logging.getLogger(__name__)

FAULT_WINDOW_SECONDS: Final = 3600.0


@dataclass(frozen=True)
class FleetModel:
    now: float  # the clock's time it describes
    gpus: list[GpuView]
    ports: list[PortView]
    hosts: list[HostView]
    events: list[EventCount]


def health_inputs(
    cur: Cursor, now: float, silent_after_seconds: float, host: str | None = None
) -> tuple[list[OpenIncident], dict[str, Liveness]]:
    """The open incidents and each host's liveness, through the store API the read API uses too (so both
    decide the same health); empty for a store without the tables (older than the incidents schema)."""
    have = tables(cur)
    incidents = open_incidents(cur) if "incidents" in have else []
    seen = hosts_seen(cur) if "fleet_hosts" in have else []
    if host is not None:
        incidents = [i for i in incidents if i.host == host]
        seen = [h for h in seen if h.host == host]
    return incidents, hosts_liveness(
        ((h.host, h.last_seen, h.interval_seconds) for h in seen), now, silent_after_seconds
    )


def build_fleet_model(
    cur: Cursor, now: float, risk_threshold: float, silent_after_seconds: float = 0.0
) -> FleetModel:
    """`silent_after_seconds`: controller.silent_after_seconds (0: three flush intervals plus a margin)."""
    incidents, liveness = health_inputs(cur, now, silent_after_seconds)
    states = latest_gpu_states(cur, now)
    events = event_counts(cur, now - FAULT_WINDOW_SECONDS, now)
    risks = risk_by_device(cur, now)
    ports = port_views(
        port_states(cur, now - LIVE_WINDOW_SECONDS, now),
        port_counters(cur, now - FAULT_WINDOW_SECONDS, now),
        now,
        incidents,
        liveness,
    )
    gpus = gpu_views(states, events, risks, now, risk_threshold, incidents, liveness)
    return FleetModel(now, gpus, ports, host_views(gpus, ports, incidents, liveness, now), events)


_NEVER = float("-inf")


class SnapshotCache:
    """Stale-while-rebuilding: `get` returns the model at hand and starts a rebuild when it is too old."""

    def __init__(
        self,
        build: Callable[[], FleetModel],
        max_age_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self._max_age = max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._model: FleetModel | None = None
        # Clock time; minus infinity means "stale now". Not 0.0: the monotonic clock counts from boot, so
        # in a machine's first `max_age` seconds a model "built at 0.0" would still look young.
        self._built_at = _NEVER
        self._rebuilding = False

    def get(self) -> FleetModel:
        with self._lock:
            model, age = self._model, self._clock() - self._built_at
            stale = model is not None and age > self._max_age and not self._rebuilding
            if stale:
                self._rebuilding = True
        if model is None:
            return self._rebuild_now()
        if stale:
            threading.Thread(
                target=self._rebuild_quietly, name="fleetguard-dashboard-model", daemon=True
            ).start()
        return model

    def invalidate(self) -> None:
        with self._lock:
            self._built_at = _NEVER

    def _rebuild_now(self) -> FleetModel:
        model = self._build()
        with self._lock:
            self._model, self._built_at = model, self._clock()
        return model

    def _rebuild_quietly(self) -> None:
        try:
            self._rebuild_now()
        except Exception:  # the next request tries again; the page keeps the model it has
            log.exception("dashboard: rebuilding the fleet model failed")
        finally:
            with self._lock:
                self._rebuilding = False
