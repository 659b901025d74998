"""Shutdown order: the training runtime stops accepting, then the final flush. Every report the runtime
acknowledged (HTTP 200) while the daemon was stopping is in the store; nothing acknowledged is lost and the
log blames nothing."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from fleetguard import client as fg
from fleetguard.agent.agent import Agent
from fleetguard.agent.daemon import DaemonResult, run_daemon
from fleetguard.agent.extension import Extension
from fleetguard.config import Config, load_config
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot
from fleetguard.runtime.extension import runtime_extension
from fleetguard.runtime.service import RuntimeRecord, RuntimeService, RuntimeServiceConfig
from fleetguard.store import Store
from straggler.analysis import RuntimeAnalyzer

pytestmark = pytest.mark.integration

SENDERS = 8


ACKS_BEFORE_STOP = 100  # the daemon is stopped once this many reports were acknowledged, whatever the load


class Sender(threading.Thread):
    """One job's rank 0, reporting as fast as the agent answers, until the daemon has returned."""

    def __init__(self, job: str, endpoint: str, done: threading.Event, progress: threading.Semaphore) -> None:
        super().__init__(name=f"sender-{job}", daemon=True)
        identity = fg.Identity(job, rank=0, local_rank=0, world_size=1, host="h", pid=os.getpid())
        # No background reporting thread: this sender reports itself, in its own loop.
        self.client = fg.Client(identity, endpoint=endpoint, heartbeat_interval_seconds=3600.0, start=False)
        self.job = job
        self.done = done
        self.progress = progress
        self.acked: list[int] = []

    def run(self) -> None:
        step = 0
        while not self.done.is_set():
            step += 1
            self.client.step(step)
            if self.client.report_once():
                self.acked.append(step)
                self.progress.release()
            else:
                time.sleep(0.01)  # stopping (503) or gone (refused): keep asking until the daemon returns


class SlowAnalyzer(RuntimeAnalyzer):
    """The real analyzer, taking 20 ms more per record, under the service's analysis lock (as a big tick
    under load does): reports queue up inside the service, so many are in flight when the daemon stops."""

    def observe(self, record: RuntimeRecord, now: float | None = None) -> None:
        time.sleep(0.02)  # the scenario: analysis slower than reports arrive
        super().observe(record, now)


def slow_runtime(slot: RuntimeSlot) -> Extension:
    def start(agent: Agent, _store: Store) -> None:
        config = RuntimeServiceConfig(host="h", port=0)
        service = RuntimeService(config, agent.clock, sink=agent.submit, analyzer=SlowAnalyzer())
        service.start()
        slot.service = service

    def stop() -> None:
        service = slot.service
        assert isinstance(service, RuntimeService)
        service.stop()

    return Extension("training runtime", start, stop, key="runtime.port 0")


def daemon_config(store: Path) -> Config:
    return load_config(
        None,
        env={},
        overrides={
            "store.path": str(store),
            "agent.metrics_address": "127.0.0.1",
            "agent.metrics_port": 0,
            "agent.flush_interval_seconds": 3600.0,  # only the final flush stores anything
            "runtime.port": 0,
        },
    )


def run_with_senders(
    config: Config, runtime: Extension, slot: RuntimeSlot
) -> tuple[DaemonResult, set[tuple[str, int]]]:
    """Run the daemon with the senders reporting throughout and through its shutdown, which starts once
    ACKS_BEFORE_STOP reports were acknowledged (SIGTERM, as operators stop it); return its result and every
    (job, step) the runtime acknowledged."""
    senders: list[Sender] = []
    done = threading.Event()
    progress = threading.Semaphore(0)

    def stop_after_enough_acks() -> None:
        deadline = time.monotonic() + 120  # an agent that never answers fails the test, not its timeout
        acks = 0
        while acks < ACKS_BEFORE_STOP and progress.acquire(timeout=max(0.0, deadline - time.monotonic())):
            acks += 1
        os.kill(os.getpid(), signal.SIGTERM)  # run_daemon's handler is installed until the daemon returns

    def ready(_metrics_port: int) -> None:
        service = slot.service
        assert isinstance(service, RuntimeService)
        senders.extend(Sender(f"job-{i}", service.endpoint, done, progress) for i in range(SENDERS))
        for sender in senders:
            sender.start()
        threading.Thread(target=stop_after_enough_acks, daemon=True).start()

    try:
        result = run_daemon(config, [], None, extensions=[runtime], on_ready=ready, out=io.StringIO())
    finally:
        done.set()
    for sender in senders:
        sender.join(timeout=120)
        assert not sender.is_alive()
    return result, {(s.job, step) for s in senders for step in s.acked}


def stored_heartbeats(store: Path) -> set[tuple[str, int]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute("SELECT job_id, step FROM heartbeats").fetchall()
    finally:
        con.close()
    return {(job.partition("@")[0], step) for job, step in rows}  # the runtime adds @uid<owner>


ISOLATED = "FG_TEST_ISOLATED"  # not FLEETGUARD_*: the config refuses variables it does not know


def ran_in_a_fresh_interpreter(request: pytest.FixtureRequest) -> bool:
    """Run this test again in a fresh Python and report whether it did (the caller then returns).

    The daemon runs in the test process, which at this point of the suite holds whatever earlier tests left
    running there (their threads compete for the GIL): the 0.5 s report timeout of the clients measured that,
    not the runtime. A fresh interpreter holds only this test's daemon."""
    if os.environ.get(ISOLATED):
        return False
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid]
    result = subprocess.run(
        argv,
        cwd=request.config.rootpath,
        env={**os.environ, ISOLATED: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"\b1 passed\b", result.stdout), result.stdout[-2000:]
    return True


@pytest.mark.parametrize("slow", [False, True], ids=["runtime", "runtime-with-slow-analysis"])
def test_reports_acknowledged_while_stopping_are_all_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, slow: bool, request: pytest.FixtureRequest
) -> None:
    if ran_in_a_fresh_interpreter(request):
        return
    store = tmp_path / "fleet.duckdb"
    config = daemon_config(store)
    slot = RuntimeSlot()
    runtime = slow_runtime(slot) if slow else runtime_extension(config, slot)
    with caplog.at_level(logging.WARNING):
        result, acked = run_with_senders(config, runtime, slot)
    assert len(acked) >= ACKS_BEFORE_STOP  # the senders did report before and during the shutdown
    lost = acked - stored_heartbeats(store)
    assert not lost, f"{len(lost)} acknowledged reports are not in the store, e.g. {sorted(lost)[:5]}"
    assert result.unstored_rows == 0 and result.write_errors == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
