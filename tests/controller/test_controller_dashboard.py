"""`fleetguard controller` serves the operators' dashboard from its own store, beside the ingest API."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from fleetguard.config import load_config
from fleetguard.controller.process import start_controller
from tests.controller.helpers import start_test_controller

pytestmark = pytest.mark.integration


def test_the_controller_serves_the_dashboard_and_closes_it_on_stop(tmp_path: Path) -> None:
    controller = start_test_controller(tmp_path, extra={"dashboard.enabled": True, "dashboard.port": 0})
    url = controller.running.dashboard_url
    try:
        assert url is not None and url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=60) as response:
            page = response.read().decode()
        assert response.status == 200 and "_dash-config" in page
    finally:
        controller.running.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


def test_a_dashboard_port_in_use_is_a_start_up_failure_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        overrides = {
            "store.path": str(tmp_path / "c.duckdb"),
            "controller.listen": "127.0.0.1:0",
            "controller.tokens_file": str(tmp_path / "tokens.json"),
            "dashboard.port": port,
        }
        with pytest.raises(OSError, match=f"dashboard.port: cannot listen on 127.0.0.1:{port}"):
            start_controller(load_config(overrides=overrides))
