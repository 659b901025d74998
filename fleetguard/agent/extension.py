"""The parts `up` runs beside the agent (training runtime, incident loop, scoring), as its daemon sees them.

Here rather than in the daemon so that the services that provide extensions (fleetguard.runtime,
fleetguard.incidents) import the agent's interface, never the process shell that runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetguard.agent.agent import Agent

if TYPE_CHECKING:
    # Types only: an agent whose sink keeps no store (it ships to a controller) never loads DuckDB.
    from fleetguard.store import Store


@dataclass
class Extension:
    """Something `up` runs beside the agent (training runtime, live scoring): started after the agent is
    ready with a function that hands records to the store, stopped before the final flush.

    `stop` must return only once the part accepts nothing more and has handed every record it acknowledged
    to the agent: the final flush follows it."""

    name: str
    start: Callable[[Agent, Store], None]  # the store is for reads (on its thread: store.cursor())
    stop: Callable[[], None]
    # A part the configuration asked for (the training runtime): if it cannot start, neither does the daemon,
    # with `key` (e.g. "runtime.port 9477") and `off_switch` (e.g. "runtime.enabled = false") in the error.
    # Empty key: optional, the daemon runs without it and says so.
    key: str = ""
    off_switch: str = ""
    # What to do instead when the part cannot have its socket (an OSError), said in full where "`off_switch`
    # runs without it" is not the whole advice (the dashboard: another port, or off).
    hint: str = ""
    # For a part that reads no store (the training runtime): how it starts beside a sink that keeps none (an
    # agent shipping to a controller). A part without it needs a store, and such a daemon refuses it.
    start_without_store: Callable[[Agent], None] | None = None
