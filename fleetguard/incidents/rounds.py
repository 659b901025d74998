"""One round of the incident service, as `fleetguard up` and the controller run it."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from diagnosis.incident import IncidentChange
from fleetguard.alerts.outbox import requeue_dead
from fleetguard.alerts.relay import AlertRelay
from fleetguard.alerts.silences import apply_request
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.service import IncidentService
from fleetguard.store.operator_requests import Request, take

log = logging.getLogger(__name__)


PRUNE_EVERY_SECONDS = 3600.0


def incident_round(
    service: IncidentService,
    feed: StoreFeed,
    relay: AlertRelay | None,
    store_path: str,
    now: float,
    retention_days: float = 30.0,
) -> list[IncidentChange]:
    """Operator requests first, then the records stored since the last round; new alerts wake the relay."""
    reset = take(store_path, Request.BREAKER_RESET)
    released: list[IncidentChange] = []  # repairs the breaker held, asked for again with the reset
    if reset is not None:
        released = service.reset_breaker(now, process_backlog=bool(reset.get("process_backlog", False)))
        log.warning("circuit breaker reset by an operator")
    replay = take(store_path, Request.ALERTS_REPLAY)
    if replay is not None:
        endpoint = replay.get("endpoint")
        requeued = requeue_dead(service.con, now, endpoint if isinstance(endpoint, str) else None)
        log.warning("%d dead-lettered alerts queued again", requeued)
    silences = take(store_path, Request.ALERTS_SILENCE)
    if silences is not None:
        for line in apply_request(service.con, silences, now):
            log.warning("%s", line)
    with collector_paused():
        changes = service.round(feed.read(now), now)
    if now >= service.next_prune_at:
        service.prune(now, retention_days)
        service.next_prune_at = now + PRUNE_EVERY_SECONDS
    if relay is not None and (changes or released or replay is not None or silences is not None):
        relay.wake()
    return released + changes


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for a round. A round at fleet size makes ~100k short-lived
    containers (the rows it fetches, the places of quiet rows), freed by reference counting when it ends;
    each young-generation pass the allocations set off during it walked all of those still alive: 5 passes,
    ~30 ms, a tenth of a 2,048-host round, reclaiming nothing. The first pass after it (~1.5 ms there) runs
    as usual, and collects whatever cycles the round left.

    Re-enabled only when it was enabled before: a process that runs with it off keeps it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
