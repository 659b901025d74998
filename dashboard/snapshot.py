"""The fleet model (every GPU, port and host with its health) computed once per refresh period and shared by
every viewer of the fleet and network pages.

Building it reads every GPU's and port's newest rows and classifies 16,384 GPUs and ports in Python: about a
second on a 2,048-host fleet. A page should not wait for that, nor should ten open tabs do it ten times: the
dashboard's server has it built when it starts and rebuilt in the background (`SnapshotCache`), so requests
get the model at hand and never wait for a build. What a page shows is at most two refresh periods old while
someone watches, at most a minute old for the first visitor after a quiet spell; the fleet and network pages
say when their model was taken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
    # Each GPU's host by its UUID, built with the model (off the requests): where a GPU's page seeks its rows.
    gpu_hosts: dict[str, str] = field(default_factory=dict)


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
    hosts = host_views(gpus, ports, incidents, liveness, now)
    return FleetModel(now, gpus, ports, hosts, events, {s.uuid: s.host for s in states})


_NEVER = float("-inf")
# While no one has asked for the model this long, the keeper rebuilds it this often instead of every refresh
# period: a dashboard nobody watches costs a build a minute (~0.5 s of one core at 2,048 hosts), and the
# first visitor after a quiet spell is shown a model at most this old (the page says how old) while the
# next one is built.
IDLE_REBUILD_SECONDS: Final = 60.0
# At most this share of the wall clock goes to building models while someone watches: a model stays fresh
# for at least its last build's time divided by this. The dashboard runs in the controller's process, whose
# one interpreter also answers the fleet's agents; a build is ~0.5 s at 2,048 hosts (every refresh period,
# 5 s: unchanged) but grows with the fleet, and at 8,192 hosts every 5 s would be half a core.
MAX_BUILD_SHARE: Final = 0.15


class SnapshotCache:
    """Stale-while-rebuilding: `get` returns the model at hand and has a new one built when it is too old.

    Started (`start`, by `serve_dashboard`), a keeper thread builds the first model at once and the next one
    every `max_age_seconds` while someone looks (every `idle_seconds` while no one does; never more often
    than MAX_BUILD_SHARE of the time, however long a build takes), so no request waits
    for a build: at 2,048 hosts a build is ~0.5 s, the whole budget of a first render. A request never builds
    while one is under way (one build at a time, bounded work); only before the first model exists does it
    wait, for that build. Not started (an app without its server: tests), the first request builds and a
    stale model is rebuilt beside the request that found it, as before. `close` stops the keeper.
    """

    def __init__(
        self,
        build: Callable[[], FleetModel],
        max_age_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        idle_seconds: float = IDLE_REBUILD_SECONDS,
    ) -> None:
        self._build = build
        self._max_age = max_age_seconds
        self._idle = max(idle_seconds, max_age_seconds)
        self._clock = clock
        self._cond = threading.Condition()
        self._model: FleetModel | None = None
        # When the last build ended, good or failed (a failed one, tried again at once by every request that
        # finds the model stale, would run builds back to back whatever MAX_BUILD_SHARE says). Clock time;
        # minus infinity means "stale now". Not 0.0: the monotonic clock counts from boot, so in a machine's
        # first `max_age` seconds a model "built at 0.0" would still look young.
        self._tried_at = _NEVER
        self._build_seconds = 0.0  # the last build's (the clock's seconds), good or failed: it paces the next
        self._viewed_at = _NEVER
        self._rebuilding = False
        self._keeper: threading.Thread | None = None
        self._wake = False
        self._stopping = False

    def get(self) -> FleetModel:
        start_beside = False
        with self._cond:
            self._viewed_at = self._clock()
            # Before the first model: wait for a build under way rather than start a second one.
            self._cond.wait_for(lambda: self._model is not None or not self._rebuilding)
            model = self._model
            if model is None:
                self._rebuilding = True  # this request builds it (no keeper, or its build failed)
            elif self._clock() - self._tried_at > self._fresh_for():
                if self._keeper is not None and not self._rebuilding:
                    self._wake = True  # back from a quiet spell: the keeper builds now, not in a minute
                    self._cond.notify_all()
                elif not self._rebuilding:
                    self._rebuilding = start_beside = True
        if model is None:
            return self._rebuild()
        if start_beside:
            threading.Thread(
                target=self._rebuild_quietly, name="fleetguard-dashboard-model", daemon=True
            ).start()
        return model

    def _fresh_for(self) -> float:
        """How long a model counts as fresh while watched: the refresh period, or longer when builds take
        more than MAX_BUILD_SHARE of it (under _cond)."""
        return max(self._max_age, self._build_seconds / MAX_BUILD_SHARE)

    def at_hand(self) -> FleetModel | None:
        """The model built last, if any, without waiting for one or asking for a rebuild: for a page that
        only takes a hint from it."""
        with self._cond:
            return self._model

    def invalidate(self) -> None:
        with self._cond:
            self._tried_at = _NEVER

    def start(self) -> None:
        """Build the first model now, off the caller's thread, and keep it fresh until `close`."""
        with self._cond:
            if self._keeper is not None or self._stopping:
                return
            # The first build is claimed here, not when the keeper thread first runs: a request that comes
            # between `start` and the keeper's first step must wait for that build, not start its own.
            claimed = not self._rebuilding
            self._rebuilding = True
            self._keeper = threading.Thread(
                target=self._keep, args=(claimed,), name="fleetguard-dashboard-model", daemon=True
            )
            self._keeper.start()

    def close(self) -> None:
        """Stop the keeper (after the build it may be in)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            keeper = self._keeper
        if keeper is not None:
            keeper.join()

    def wait_ready(self, timeout_seconds: float) -> bool:
        """Whether a model is at hand within `timeout_seconds` (for a caller that starts the dashboard and
        then measures or shows it: the benchmark)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._model is not None, timeout=timeout_seconds)

    def _keep(self, claimed: bool) -> None:
        """The keeper's loop; `claimed`: `start` claimed the first build for it (none was under way)."""
        while True:
            with self._cond:
                if not claimed:
                    self._cond.wait_for(lambda: self._stopping or not self._rebuilding)
                if self._stopping:
                    if claimed:
                        self._rebuilding = False
                        self._cond.notify_all()
                    return
                self._rebuilding = True
            claimed = False
            self._rebuild_quietly()
            with self._cond:
                watched = self._clock() - self._viewed_at <= self._idle
                fresh_for = self._fresh_for()
                self._cond.wait_for(
                    lambda: self._stopping or self._wake,
                    timeout=fresh_for if watched else max(self._idle, fresh_for),
                )
                self._wake = False

    def _rebuild(self) -> FleetModel:
        """Build a model; the caller has set `_rebuilding`, cleared here whatever happens."""
        started = self._clock()
        try:
            model = self._build()
        except BaseException:
            with self._cond:
                self._rebuilding, self._tried_at = False, self._clock()
                self._build_seconds = max(0.0, self._tried_at - started)
                self._cond.notify_all()
            raise
        with self._cond:
            self._model, self._tried_at, self._rebuilding = model, self._clock(), False
            self._build_seconds = max(0.0, self._tried_at - started)
            self._cond.notify_all()
        return model

    def _rebuild_quietly(self) -> None:
        try:
            self._rebuild()
        except Exception:  # the next request or round tries again; the pages keep the model they have
            log.exception("dashboard: rebuilding the fleet model failed")
