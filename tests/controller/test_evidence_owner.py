"""Evidence has an owner (issue 16, attack #1), through a live controller on loopback with real HTTP and one
token per host: a host that reports another host's job first, then freezes "its" rank and reports collective
counters far past everyone's, gets nothing queued for that host. Beside it, a real two-host job whose rank
hangs still gets its restart, on the right host (the analysis runs and acts in this same controller)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.records.runtime import CollectiveProgress, Heartbeat
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table
from tests.controller.helpers import Controller, metric_value, start_test_controller

HOSTS = ("node-a", "node-b", "evil")
# Each host ships 150 one-second steps as an agent does, several steps a batch: every commit of a batch costs
# the controller's writer lane up to its 0.1 s gather window, and a batch a step made the test 30 s long.
STEPS_PER_BATCH = 5


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path, HOSTS)
    yield c
    c.running.stop()


def _beat(t: float, host: str, job: str, rank: int, world: int, step: int, seq: int) -> list[object]:
    return [
        Heartbeat(t, host, job, rank, rank, world, 1000 + rank, step=step, section="step"),
        CollectiveProgress(t, host, job, rank, "world", seq, seq, seq),
    ]


def _records(host: str, i: int, t: float) -> list[object]:
    out: list[object] = []
    if host == "node-a":  # job-7: node-a's own single-host job, healthy; ranks 0, 1 of the two-host job-9
        for r in range(4):
            out += _beat(t, host, "job-7@uid0", r, 4, i, i)
        for r in (0, 1):
            out += _beat(t, host, "job-9@uid0", r, 4, i, i)
    elif host == "node-b":  # ranks 2, 3 of job-9; rank 3 stops moving after a minute (a real hang)
        for r in (2, 3):
            stuck = r == 3 and i >= 60
            out += _beat(t, host, "job-9@uid0", r, 4, 60 if stuck else i, 59 if stuck else i)
    else:  # evil: rank 0 of job-7 from before node-a spoke, frozen after a minute, counters far ahead
        out += _beat(t, host, "job-7@uid0", 0, 4, min(i, 60), i if i < 60 else 10**15)
    return out


def _ship(controller: Controller, host: str, seq: int, t: float, records: list[object]) -> None:
    batch = OutgoingBatch(host, "boot-1", seq, t, 1.0, "test", columns_by_table(records))
    reply = controller.ship(batch)
    assert reply.status == 200, reply.doc


def _commands(controller: Controller, host: str) -> list[dict[str, object]]:
    reply = controller.get(f"/v1/commands?host={host}")
    assert reply.status == 200
    return list(reply.doc["commands"])


def test_a_host_claiming_another_hosts_job_first_gets_no_restart_queued_for_it(
    controller: Controller,
) -> None:
    t0 = time.time() - 400  # in the past: the detectors tick at the hosts' send times, not the wall clock
    _ship(controller, "evil", 1, t0 - 1, _records("evil", 0, t0 - 1))  # evil speaks first
    time.sleep(1.5)  # the controller's runtime analysis (every second) has seen evil's claim alone
    for k, first in enumerate(range(0, 150, STEPS_PER_BATCH)):
        steps = range(first, first + STEPS_PER_BATCH)
        for host in HOSTS:
            records = [r for i in steps for r in _records(host, i, t0 + i)]
            _ship(controller, host, 2 + k, t0 + steps[-1], records)
        time.sleep(0.03)  # several analysis ticks over the run
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _commands(controller, "node-b"):
        time.sleep(0.2)  # polling a real controller's analysis: it offers no event to wait on
    node_b = _commands(controller, "node-b")
    assert [(c["kind"], c["job_id"]) for c in node_b] == [("restart", "job-9@uid0")]
    assert _commands(controller, "node-a") == []  # job-7 is node-a's alone, whatever evil claimed
    assert _commands(controller, "evil") == []
    # evil's records were dropped as foreign, and counted where an operator sees them
    assert metric_value(controller.metrics(), "fleetguard_controller_runtime_foreign_records_total") >= 150
