"""A command through real processes: operator -> controller -> ingest reply -> agent -> its runtime's
executor (cordon_command) -> ack in the agent's next batch; run once however often it is delivered."""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fleetguard.controller.tokens import Role, add_token
from tests.controller.fleet_processes import Fleet, stop, summary

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _post_command(fleet: Fleet, operator: str, host: str) -> str:
    request = urllib.request.Request(
        fleet.url + "/v1/commands",
        data=json.dumps({"host": host, "kind": "cordon", "reason": "test"}).encode(),
        headers={"Authorization": f"Bearer {operator}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["command"]["id"])


def _commands(fleet: Fleet) -> list[dict[str, object]]:
    with urllib.request.urlopen(fleet.url + "/v1/commands?host=a1", timeout=30) as response:
        doc = json.loads(response.read())
    return list(doc["commands"])


def test_a_cordon_from_the_controller_runs_once_on_the_right_host(tmp_path: Path, fleet: Fleet) -> None:
    operator = add_token(tmp_path / "tokens.json", "*", Role.OPERATOR)
    controller = fleet.start_controller()
    marker = tmp_path / "cordoned"
    argv = [
        sys.executable,
        "-c",
        "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')",
        str(marker),
        "{host}",
    ]
    runtime = f"port = 0\ncordon_command = {json.dumps(argv)}\n"
    # both agents run until the test stops them (SIGTERM) once the command is acked and more batches have
    # gone by: no duration to guess that outlasts the ack on a loaded machine, and none to wait out after it
    agent = fleet.start_agent("a1", 1, duration=300, runtime=runtime)
    bystander = fleet.start_agent("a2", 2, duration=300, runtime=runtime)
    try:
        fleet.wait_for_hosts({"a1", "a2"})
        command_id = _post_command(fleet, operator, "a1")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(c["acked_ts"] for c in _commands(fleet)):
            time.sleep(0.2)  # polling a real fleet of processes: it offers no event to wait on
        time.sleep(3)  # more batches and replies: the command must not run again
        [command] = _commands(fleet)
        for proc in (agent, bystander):
            proc.send_signal(signal.SIGTERM)
            summary(proc)
    finally:
        stop(controller)
    assert (command["command_id"], command["outcome"]) == (command_id, "done")
    assert marker.read_text() == "a1\n"  # once, and only on a1
