"""Agents -> a real nats-server with JetStream -> controllers per pool, as real processes on loopback:
a controller killed with SIGKILL, then the NATS server killed and restarted; every batch stored once."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scale.nats_fleet import PoolController, assert_exactly_once, kill, start_agent, stop, summary
from tests.scale.natsd import NatsServer, require_nats_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOLS = {"a1": "red", "a2": "red", "b1": "blue"}
# The agents run until the test stops them; this only bounds a test that fails half-way.
AGENT_CEILING_SECONDS = 120


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    require_nats_server()
    server = NatsServer(tmp_path, dict(POOLS))
    server.start()
    yield server
    server.stop()


def _stop_after_more_rows(pool: PoolController, agents: dict[str, subprocess.Popen[bytes]]) -> None:
    """Once `pool`'s controller has committed rows it did not have yet from each of its hosts (batches flow
    again), stop every agent with SIGTERM: they run until then, not for a duration guessed to outlast the
    outage on a loaded machine and waited out on a quiet one."""
    now = pool.hosts()
    pool.wait_for_rows({h: int(now[h]["rows"]) + 1 for h in agents if POOLS[h] == pool.pool})
    for proc in agents.values():
        proc.send_signal(signal.SIGTERM)


def _wait_for_logs(root: Path, hosts: dict[str, subprocess.Popen[bytes]], line: str) -> None:
    deadline = time.monotonic() + 60
    while not all(line in (root / f"{h}.log").read_text() for h in hosts):
        assert time.monotonic() < deadline, f"no {line!r} from every agent within 60 s"
        time.sleep(0.2)  # polling real agent processes' logs: they offer no event to wait on


def _written(result: dict[str, object]) -> int:
    rows = result["rows_written"]
    assert isinstance(rows, dict)
    return sum(int(n) for n in rows.values())


def test_two_pools_a_controller_killed_every_batch_stored_once_in_its_pool(
    tmp_path: Path, nats: NatsServer
) -> None:
    red, blue = PoolController(tmp_path, nats, "red"), PoolController(tmp_path, nats, "blue")
    controllers = {"red": red.start(), "blue": blue.start()}
    assert red.wait_for_advert() == blue.wait_for_advert() == [1, 2]
    agents = {
        h: start_agent(tmp_path, nats, h, pool, seed, AGENT_CEILING_SECONDS)
        for seed, (h, pool) in enumerate(POOLS.items())
    }
    try:
        red.wait_for_rows({"a1": 1, "a2": 1})
        kill(controllers["red"])  # pulled but unacked messages are redelivered to the next incarnation
        time.sleep(3)
        controllers["red"] = red.start()
        _stop_after_more_rows(red, agents)  # the new incarnation took over the pool

        done = {h: summary(p) for h, p in agents.items()}
        written = {h: _written(r) for h, r in done.items()}
        for host, result in done.items():
            extras = result["extras"]
            assert isinstance(extras, dict)
            assert extras["unsent_batches"] == 0, host
            assert extras["dropped_batches"] == 0, host
        red.wait_for_rows({h: n for h, n in written.items() if POOLS[h] == "red"})
        blue.wait_for_rows({"b1": written["b1"]})
        # The agents read the advertisement on connecting: their batches went as wire version 2.
        assert blue.wire_batches().get("2", 0) > 0 and red.wire_batches().get("2", 0) > 0
    finally:
        for proc in controllers.values():
            stop(proc)
        for proc in agents.values():
            if proc.poll() is None:
                kill(proc)
    assert_exactly_once(red.store, {h: n for h, n in written.items() if POOLS[h] == "red"})
    assert_exactly_once(blue.store, {"b1": written["b1"]})


def test_nats_server_restarted_mid_run_agents_spool_and_resume(tmp_path: Path, nats: NatsServer) -> None:
    red = PoolController(tmp_path, nats, "red")
    controller = red.start()
    agents = {
        h: start_agent(tmp_path, nats, h, "red", seed, AGENT_CEILING_SECONDS)
        for seed, h in enumerate(("a1", "a2"))
    }
    try:
        red.wait_for_rows({"a1": 1, "a2": 1})
        nats.kill()  # JetStream's file store and the durable consumer survive in its store directory
        time.sleep(4)  # agents keep flushing: batches stay in their spools
        nats.start()
        _wait_for_logs(tmp_path, agents, "NATS connection back")
        _stop_after_more_rows(red, agents)  # and their batches flow again

        done = {h: summary(p) for h, p in agents.items()}
        written = {h: _written(r) for h, r in done.items()}
        for host, result in done.items():
            extras = result["extras"]
            assert isinstance(extras, dict)
            assert extras["unsent_batches"] == 0, host
            assert extras["dropped_batches"] == 0, host
        red.wait_for_rows(written)
    finally:
        stop(controller)
        for proc in agents.values():
            if proc.poll() is None:
                kill(proc)
    assert_exactly_once(red.store, written)
    # The outage was seen by the agents, and they were back on NATS afterwards.
    for host in ("a1", "a2"):
        log = (tmp_path / f"{host}.log").read_text()
        assert "NATS connection lost" in log and "NATS connection back" in log, log
