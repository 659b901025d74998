"""`fleetguard status --fleet`: two real controllers on loopback, each fed over HTTP, merged into one view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetguard.cli import cli
from tests.controller.helpers import Controller, batch, start_test_controller
from tests.scale.natsd import free_port

pytestmark = pytest.mark.integration


def _two_controllers(tmp_path: Path) -> tuple[Controller, Controller]:
    (tmp_path / "red").mkdir()
    (tmp_path / "blue").mkdir()
    red = start_test_controller(tmp_path / "red", ("r1", "r2", "moved"))
    blue = start_test_controller(tmp_path / "blue", ("b1", "moved"))
    for c, host in ((red, "r1"), (red, "r2"), (blue, "b1"), (red, "moved")):
        assert c.ship(batch(host, 1)).status == 200
    # "moved" went from red's pool to blue's: blue heard from it last.
    assert blue.ship(batch("moved", 1, boot_id="boot-2")).status == 200
    return red, blue


def test_status_fleet_merges_controllers_and_counts_each_host_once(tmp_path: Path) -> None:
    red, blue = _two_controllers(tmp_path)
    try:
        urls = f"{red.url},{blue.url}"
        result = CliRunner().invoke(cli, ["status", "--fleet", urls, "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.output)
        assert doc["fleet"]["hosts"] == 4
        assert doc["fleet"]["gpus"] == 8  # 2 GPUs each in the test batches
        by_host = {h["host"]: h["controller"] for h in doc["hosts"]}
        assert by_host == {"r1": red.url, "r2": red.url, "b1": blue.url, "moved": blue.url}

        text = CliRunner().invoke(cli, ["status", "--fleet", urls])
        assert text.exit_code == 0, text.output
        assert f"controller {red.url}: 3 hosts" in text.output
        assert f"controller {blue.url}: 2 hosts" in text.output
        assert "fleet     4 hosts (" in text.output
    finally:
        red.running.stop()
        blue.running.stop()


def test_an_unreachable_controller_is_named_and_the_others_still_shown(tmp_path: Path) -> None:
    red, blue = _two_controllers(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    red_url = red.url
    try:
        result = CliRunner().invoke(cli, ["status", "--fleet", f"{red.url},{dead}"])
        assert result.exit_code == 0, result.output
        assert f"controller {dead}: UNREACHABLE" in result.output
        assert "fleet     3 hosts (" in result.output
    finally:
        red.running.stop()
        blue.running.stop()
    result = CliRunner().invoke(cli, ["status", "--fleet", f"{dead},{red_url}"])
    assert result.exit_code != 0
    assert result.output.startswith("Error: no controller could be read")
    assert "Traceback" not in result.output
