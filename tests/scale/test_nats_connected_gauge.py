"""`fleetguard_controller_nats_connected` tells the truth: 1 while the pool's consumer is connected to a
real nats-server, 0 once that server is gone (nats-py reconnects on its own, so a flag set at subscribe
time lied)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleetguard.config import load_config
from fleetguard.controller.process import RunningController, start_controller
from tests.scale.natsd import CONTROLLER_USER, NatsServer, require_nats_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

GAUGE = 'fleetguard_controller_nats_connected{pool="red"}'


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    require_nats_server()
    server = NatsServer(tmp_path, {"a1": "red"})
    server.start()
    yield server
    server.stop()


def _gauge(running: RunningController) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics", timeout=30) as response:
        text = response.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(GAUGE + " ")]
    assert len(values) == 1, text
    return values[0]


def _wait(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise TimeoutError("condition never held")


def test_the_connected_gauge_follows_the_nats_server(tmp_path: Path, nats: NatsServer) -> None:
    overrides = {
        "store.path": str(tmp_path / "controller.duckdb"),
        "controller.listen": "127.0.0.1:0",
        "controller.tokens_file": str(tmp_path / "tokens.json"),
        "controller.pool": "red",
        "dashboard.enabled": False,
        "controller.nats_url": nats.url,
        "controller.nats_user": CONTROLLER_USER,
        "controller.nats_password_file": str(nats.password_file(CONTROLLER_USER)),
    }
    running = start_controller(load_config(overrides=overrides))
    try:
        _wait(lambda: _gauge(running) == 1)
        nats.kill()
        _wait(lambda: _gauge(running) == 0)
    finally:
        running.stop()
