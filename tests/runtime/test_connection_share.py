"""One local user holding every connection the runtime endpoint takes must not lock other users' ranks out:
connections are capped per uid below the total. The other user is a real process as uid 65534."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from fleetguard.clock import FakeClock
from fleetguard.httpserve import Limits
from fleetguard.jobcontrol.commands import Command
from fleetguard.runtime.protocol import RankReport
from fleetguard.runtime.server import HTTP_LIMITS, RuntimeServer
from tests.runtime.helpers import report_body

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

_HOLDER = """
import encodings.idna, os, socket, sys  # idna: read before the interpreter's files may be unreadable
port, count = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setgid(65534); os.setuid(65534)
held = []
for _ in range(count):
    held.append(socket.create_connection(("127.0.0.1", port), timeout=30))
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def server() -> Iterator[RuntimeServer]:
    def on_report(report: RankReport) -> list[Command]:
        return []

    limits = Limits(workers=2, max_connections=24, max_connections_per_owner=8)
    server = RuntimeServer(on_report, host="agent", clock=FakeClock(), port=0, limits=limits)
    server.start()
    yield server
    server.stop()


def test_one_user_holding_every_connection_does_not_lock_out_another(server: RuntimeServer) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(server.port), "24"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        deadline = time.monotonic() + 30
        # every one of its connections has reached the server and been looked up (on a worker thread):
        # poll, not a fixed sleep, so a loaded machine is only slower, not a failure
        while server.http_stats.connections_refused < 16 and time.monotonic() < deadline:
            time.sleep(0.02)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/v1/report", body=report_body(pid=os.getpid()))
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())) == (200, {"commands": []})
        conn.close()
        assert server.http_stats.connections_refused >= 16  # the holder's beyond its share of 8
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_the_runtime_caps_a_users_connections_below_the_total() -> None:
    per_owner = HTTP_LIMITS.max_connections_per_owner
    assert per_owner is not None and per_owner * 4 <= HTTP_LIMITS.max_connections
