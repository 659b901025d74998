"""`fleetguard up`'s incidents: the controller's incidents task on a real agent and store. A fault the agent
reads is stored at once and evaluated at once (not at the next flush or diagnosis interval, both set to a
minute here), its alert reaches a real receiver, and the repair it asks for runs after the commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleetguard.agent.agent import Agent, Schedule
from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import SystemClock
from fleetguard.config import load_config
from fleetguard.incidents.extension import IncidentSummary, incidents_extension
from fleetguard.store import Store
from tests.agent.fakes import ScriptedCollector
from tests.alerts.receiver import Received, receiver
from tests.diagnosis.records import xid


@pytest.fixture
def running_up(tmp_path: Path) -> Iterator[tuple[ScriptedCollector, Received, Store, IncidentSummary]]:
    collector = ScriptedCollector(host="node1")
    with receiver(None) as (url, got), Store.open(tmp_path / "s.duckdb") as store:
        config = load_config(
            overrides={
                "store.path": str(tmp_path / "s.duckdb"),
                "diagnosis.interval_seconds": 60,
                "diagnosis.reboot_node_command": ["true"],
                "alerts.webhooks": [{"name": "chat", "url": url, "kind": "slack", "rate_per_second": 100}],
            }
        )
        schedule = Schedule(sample_interval_seconds=0.2, flush_interval_seconds=60)
        agent = Agent([collector], WriteBuffer(store), MetricsState(), SystemClock(), schedule=schedule)
        summary = IncidentSummary()
        extension = incidents_extension(config, summary)
        extension.start(agent, store)
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,))
        thread.start()
        try:
            yield collector, got, store, summary
        finally:
            stop.set()
            thread.join(timeout=30)
            extension.stop()
            agent.shutdown()


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # a real agent thread: bounded polling
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_fault_is_evaluated_as_soon_as_it_is_stored_and_its_repair_runs_after_the_commit(
    running_up: tuple[ScriptedCollector, Received, Store, IncidentSummary],
) -> None:
    collector, got, store, summary = running_up
    collector.emit(xid(79, time.time(), host="node1"))
    # Flush and diagnosis intervals are a minute: only the event-driven path can bring it in time.
    assert wait_for(lambda: len(got.requests) >= 1), "no alert within 30 s"
    assert got.requests[0]["body"]["text"].startswith(":red_circle: opened: xid:79 on node1")
    con = store.cursor()
    try:
        assert wait_for(
            lambda: con.execute("SELECT outcome FROM incident_actions").fetchall() == [("succeeded",)]
        )
    finally:
        con.close()
    # Published after the repair's end is stored (extension.py's loop): waited for, not raced.
    assert wait_for(lambda: summary.describe() == "incidents 1 (1 critical)"), summary.describe()
