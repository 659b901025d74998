"""Crash versus hang, and which rank a crash names: the exit the PID watcher sees decides that a rank is dead
(whatever its silence looked like before), and the rank that failed first in its own right is named, not
the first process to exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import pytest

from fleetguard.clock import FakeClock, SystemClock
from fleetguard.jobcontrol import procfs
from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.findings import Finding
from fleetguard.runtime.crashes import CRASH_SETTLE_SECONDS
from fleetguard.runtime.pid_watcher import ProcessExit
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig
from tests.runtime.helpers import JOB, report_body, root_report
from tests.runtime.torchrun_job import wait_until

WORLD = 4


class Sink:
    def __init__(self) -> None:
        self.records: list[object] = []

    def __call__(self, batch: Sequence[object]) -> None:
        self.records.extend(batch)

    def findings(self, kind: str | None = None) -> list[Finding]:
        return [r for r in self.records if isinstance(r, Finding) and kind in (None, r.kind)]


def send(service: RuntimeService, clock: FakeClock, rank: int, step: int, **fields: object) -> None:
    body = report_body(
        rank=rank,
        local_rank=rank,
        world_size=WORLD,
        pid=1000 + rank,
        step=step,
        timings=[],
        collectives=[],
        **fields,
    )
    service.handle_report(root_report(body, clock.time()))


def healthy_steps(service: RuntimeService, clock: FakeClock, steps: range) -> None:
    for step in steps:
        clock.advance(1.0)
        for rank in range(WORLD):
            send(service, clock, rank, step)
        service.tick_once()


def test_a_peer_that_exits_first_on_a_closed_connection_is_collateral_the_raising_rank_is_named() -> None:
    clock, sink = FakeClock(), Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), clock, sink)
    healthy_steps(service, clock, range(1, 6))
    raised_at = clock.time() + 0.2
    clock.advance(0.3)
    send(
        service,
        clock,
        2,
        5,
        status="exiting",
        error={"ts": raised_at, "type": "ValueError", "message": "bad"},
    )
    peer_error = {
        "ts": raised_at + 0.05,
        "type": "RuntimeError",
        "message": "[gloo] Connection closed by peer",
    }
    send(service, clock, 1, 5, status="exiting", error=peer_error)
    service.handle_exit(ProcessExit(1001, (JOB, 1), 1))  # rank 1 is the first process to exit
    service.tick_once()
    service.handle_exit(ProcessExit(1002, (JOB, 2), 1))  # the rank that raised exits later
    clock.advance(CRASH_SETTLE_SECONDS)
    service.tick_once()
    [dead] = sink.findings("dead_rank")
    evidence = json.loads(dead.evidence_json)
    assert (dead.rank, evidence["error"], evidence["first_exit_rank"]) == (2, "ValueError: bad", 1)
    assert evidence["failed_at"] == raised_at and "failed with ValueError: bad" in dead.summary
    assert {f["rank"]: f["blame"] for f in evidence["failures"]} == {1: "collateral", 2: "own"}
    service.stop()


def test_a_rank_that_says_it_is_exiting_is_not_hung_while_it_takes_its_time_and_its_exit_names_it() -> None:
    clock, sink = FakeClock(), Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), clock, sink)
    healthy_steps(service, clock, range(1, 12))  # learns 1 s heartbeats: a silence of 5 s is a hang
    error = {"ts": clock.time(), "type": "KeyError", "message": "'labels'"}
    send(service, clock, 3, 11, status="exiting", error=error)
    for _ in range(20):  # it takes 20 s to exit; its peers wait for it in the step's collective
        clock.advance(1.0)
        for rank in range(3):
            send(service, clock, rank, 11)
        service.tick_once()
    assert sink.findings("hung_rank") == [] and sink.findings("hang_localised") == []
    service.handle_exit(ProcessExit(1003, (JOB, 3), 1))
    service.tick_once()
    [dead] = sink.findings("dead_rank")
    evidence = json.loads(dead.evidence_json)
    assert (dead.rank, evidence["exit_code"], evidence["error"]) == (3, 1, "KeyError: 'labels'")
    service.stop()


def test_a_rank_that_never_finishes_exiting_is_hung() -> None:
    clock, sink = FakeClock(), Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), clock, sink)
    healthy_steps(service, clock, range(1, 6))
    send(service, clock, 0, 5, status="exiting", error={"ts": clock.time(), "type": "E", "message": ""})
    clock.advance(61.0)
    service.tick_once()
    hung = sink.findings("hung_rank")
    assert [(f.rank, json.loads(f.evidence_json)["cause"]) for f in hung] == [(0, "stuck_exiting")]
    service.stop()


SLOW_EXIT = """
import atexit, sys, time
atexit.register(time.sleep, 6.0)  # runs after the client's own exit handler: a slow teardown
from fleetguard import client as fg
fg.attach(job_id="slow-exit", endpoint=sys.argv[1], heartbeat_interval_seconds=0.2)
for step in range(30):
    fg.step(step)
    time.sleep(0.1)
raise ValueError("loss is nan")
"""


def test_a_real_rank_that_raises_and_takes_seconds_to_exit_is_dead_with_its_exception_not_hung(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def slow_read_stat(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)  # the watcher as late as a loaded machine makes it (CI once reaped before it read)
        return procfs.read_stat(*args, **kwargs)

    monkeypatch.setattr("fleetguard.runtime.pid_watcher.read_stat", slow_read_stat)
    sink = Sink()
    service = RuntimeService(
        RuntimeServiceConfig(host="node1", port=0, tick_interval_seconds=0.1), SystemClock(), sink
    )
    service.start()
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "PATH": "/usr/bin:/bin"}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_EXIT, service.endpoint], env=env, stderr=subprocess.PIPE
        )
        started = time.monotonic()
        # Exited, not yet reaped: the agent reads a rank's exit code from its zombie's /proc entry, and a
        # parent that reaped it first (this test's wait did, under load) leaves it unknown. A launcher
        # reaps on its own schedule; here the reaping waits until the finding is in.
        exited = wait_until(lambda: _exited_unreaped(proc.pid), 60, "the rank's exit")
        assert (exited.si_code, exited.si_status) == (os.CLD_EXITED, 1)
        assert time.monotonic() - started > 6.0
        [dead] = wait_until(lambda: sink.findings("dead_rank"), 30, "the dead_rank finding")
        assert proc.wait(timeout=10) == 1
        evidence = json.loads(dead.evidence_json)
        assert (dead.job_id, evidence["exit_code"]) == (job_key(os.getuid(), "slow-exit"), 1)
        assert evidence["error"] == "ValueError: loss is nan"
        assert [f.kind for f in sink.findings()] == ["dead_rank"]  # never called hung while it exited
    finally:
        service.stop()
        if proc.stderr is not None:
            proc.stderr.close()


def _exited_unreaped(pid: int) -> os.waitid_result | None:
    """The child's exit, once it has exited, leaving it a zombie (WNOWAIT); None while it runs."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
