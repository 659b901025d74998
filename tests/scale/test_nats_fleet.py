"""Agents -> a real nats-server with JetStream -> controllers per pool, as real processes on loopback:
a controller killed with SIGKILL, then the NATS server killed and restarted; every batch stored once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scale.nats_fleet import PoolController, assert_exactly_once, kill, start_agent, stop, summary
from tests.scale.natsd import NatsServer, require_nats_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOLS = {"a1": "red", "a2": "red", "b1": "blue"}


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    require_nats_server()
    server = NatsServer(tmp_path, dict(POOLS))
    server.start()
    yield server
    server.stop()


def _written(result: dict[str, object]) -> int:
    rows = result["rows_written"]
    assert isinstance(rows, dict)
    return sum(int(n) for n in rows.values())


def test_two_pools_a_controller_killed_every_batch_stored_once_in_its_pool(
    tmp_path: Path, nats: NatsServer
) -> None:
    red, blue = PoolController(tmp_path, nats, "red"), PoolController(tmp_path, nats, "blue")
    controllers = {"red": red.start(), "blue": blue.start()}
    agents = {
        h: start_agent(tmp_path, nats, h, pool, seed, 14) for seed, (h, pool) in enumerate(POOLS.items())
    }
    try:
        red.wait_for_rows({"a1": 1, "a2": 1})
        kill(controllers["red"])  # pulled but unacked messages are redelivered to the next incarnation
        time.sleep(3)
        controllers["red"] = red.start()

        done = {h: summary(p) for h, p in agents.items()}
        written = {h: _written(r) for h, r in done.items()}
        for host, result in done.items():
            extras = result["extras"]
            assert isinstance(extras, dict)
            assert extras["unsent_batches"] == 0, host
            assert extras["dropped_batches"] == 0, host
        red.wait_for_rows({h: n for h, n in written.items() if POOLS[h] == "red"})
        blue.wait_for_rows({"b1": written["b1"]})
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
    agents = {h: start_agent(tmp_path, nats, h, "red", seed, 16) for seed, h in enumerate(("a1", "a2"))}
    try:
        red.wait_for_rows({"a1": 1, "a2": 1})
        nats.kill()  # JetStream's file store and the durable consumer survive in its store directory
        time.sleep(4)  # agents keep flushing: batches stay in their spools
        nats.start()

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
