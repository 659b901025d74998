"""Where the agent's rows go, chosen once at start-up: a local store (fleetguard.agent.local_sink), the spool
and shipper of an agent that ships to a controller (fleetguard.shipping.agent_side), or, inside
`fleetguard up`, the controller's own ingest in the same process (fleetguard.controller.inprocess).

The agent loop only sees the sink's `buffer`; the daemon starts the sink before the first round and closes it
after the final flush. This module loads no DuckDB: a sink that keeps no store never imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.registry import Collector as PromCollector

    from fleetguard.agent.agent import RowBuffer
    from fleetguard.store import Store


class Sink(Protocol):
    @property
    def buffer(self) -> RowBuffer:
        """Where rows wait for the next flush; a flush hands them on."""

    @property
    def store(self) -> Store | None:
        """The store this process writes, for extensions that read it (their own cursors); None when rows
        leave the host and no store is kept here."""

    @property
    def metrics(self) -> PromCollector | None:
        """The sink's own series on the agent's /metrics, if any."""

    def start(self) -> None:
        """Before the first round (threads that carry rows on)."""

    def apply_retention(self, days: float, now: float) -> None:
        """Drop what is older than `days` before `now` (the agent's clock, so that a daemon on a test's clock
        never deletes what it just stored) where this sink keeps it (on the agent's writer thread)."""

    def close(self) -> None:
        """After the agent's final flush: hand on what can be, release files and threads."""

    def summary(self) -> dict[str, object]:
        """What the daemon's stop line adds about this sink (unsent batches, ...)."""
