"""The daemon's dependencies as one object (fleetguard/agent/daemon_deps.py): `fleetguard agent` runs in the
test process on a FakeClock, round by round as the test moves time, with a real store and /metrics server."""

from __future__ import annotations

import io
import threading
import urllib.request
from pathlib import Path

import duckdb
import pytest

from fleetguard.agent.daemon import DaemonResult, run_daemon
from fleetguard.agent.daemon_deps import DaemonDeps, StopSwitch
from fleetguard.agent.sources import build_sources
from fleetguard.clock import FakeClock
from fleetguard.config import load_config

STEP_TIMEOUT = 60.0  # real seconds; a loop that does not return to its wait within it is stuck


def test_fake_clock_wait_ends_when_time_reaches_the_deadline_or_the_event_is_set() -> None:
    clock = FakeClock()
    event = threading.Event()
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(clock.wait(event, 10.0)))
    waiter.start()
    clock.wait_until_idle(1, STEP_TIMEOUT)  # the waiter is blocked on a time ahead
    clock.advance(9.0)
    clock.wait_until_idle(1, STEP_TIMEOUT)  # ... still: 9 of its 10 s have passed
    assert waiter.is_alive()
    clock.advance(1.0)
    waiter.join(STEP_TIMEOUT)
    assert results == [False]

    waiter = threading.Thread(target=lambda: results.append(clock.wait(event, 3600.0)))
    waiter.start()
    clock.wait_until_idle(1, STEP_TIMEOUT)
    event.set()
    waiter.join(STEP_TIMEOUT)
    assert results == [False, True]
    assert clock.idle(0)


def test_wait_until_idle_fails_when_a_loop_does_not_come_back() -> None:
    with pytest.raises(AssertionError, match="0 of 1 threads"):
        FakeClock().wait_until_idle(1, 0.05)


def test_the_agent_daemon_samples_once_per_second_of_its_clock_and_stops_at_its_duration(
    tmp_path: Path,
) -> None:
    store = tmp_path / "fleet.duckdb"
    config = load_config(
        env={},
        overrides={
            "simulate.fleet": "1x2",
            "store.path": str(store),
            "agent.metrics_port": 0,
            "agent.flush_interval_seconds": 1,
            "collectors.kmsg_state_path": str(tmp_path / "kmsg.seq"),
        },
    )
    clock = FakeClock()
    switch = StopSwitch()
    sources = build_sources(config, clock=clock)
    ports: list[int] = []
    results: list[DaemonResult] = []

    def run() -> None:
        deps = DaemonDeps.on_clock(clock, switch)
        out = io.StringIO()
        results.append(
            run_daemon(
                config,
                sources.collectors,
                sources.folder,
                duration_seconds=30,
                on_ready=ports.append,
                out=out,
                deps=deps,
            )
        )

    daemon = threading.Thread(target=run, name="test-agent")
    daemon.start()
    try:
        for _ in range(10):
            clock.wait_until_idle(2, STEP_TIMEOUT)  # the agent loop and the --duration timer
            clock.advance(1.0)
        clock.wait_until_idle(2, STEP_TIMEOUT)
        # a real /metrics server answers while the daemon waits for its clock
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/metrics", timeout=10) as resp:
            page = resp.read().decode()
        assert "fleetguard_agent_rounds_total 11.0" in page  # one at start, one per second since
        for _ in range(19):
            clock.advance(1.0)
            clock.wait_until_idle(2, STEP_TIMEOUT)
        clock.advance(1.0)  # 30 s: --duration has passed, and the daemon stops on its own
        daemon.join(STEP_TIMEOUT)
        assert not daemon.is_alive()
    finally:
        switch.stop()
        daemon.join(STEP_TIMEOUT)
    assert not daemon.is_alive()
    assert clock.monotonic() == pytest.approx(30.0, abs=1.0)
    [result] = results
    assert result.rounds in (30, 31)
    assert result.unstored_rows == 0
    con = duckdb.connect(str(store), read_only=True)
    try:
        sql = "SELECT epoch(min(ts)), epoch(max(ts)), count(*) FROM gpu_samples"
        first, last, n = con.execute(sql).fetchone() or ()
    finally:
        con.close()
    assert n == 2 * result.rounds  # two GPUs, every round stored
    assert first == pytest.approx(FakeClock().time()) and last - first == pytest.approx(result.rounds - 1)
