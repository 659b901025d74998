"""Reads off loopback need an operator token: GET /v1/... and /metrics alike (host names, jobs, silences are
the fleet's layout). On loopback both stay open. Real controllers, real HTTP."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.controller.server import reads_need_token
from tests.controller.helpers import Controller, start_test_controller


@pytest.mark.parametrize(
    ("address", "needs"),
    [
        ("127.0.0.1", False),
        ("127.0.0.2", False),
        ("::1", False),
        ("localhost", False),
        ("0.0.0.0", True),
        ("::", True),
        ("", True),
        ("192.0.2.2", True),
        ("fd00::2", True),
        ("controller.example", True),  # a name may resolve anywhere
    ],
)
def test_the_rule_is_by_listen_address(address: str, needs: bool) -> None:
    assert reads_need_token(address) is needs


def a_non_loopback_address() -> str | None:
    """An address of this machine other than loopback (the source address a route would use), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # UDP connect sends nothing; it only picks a route
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def status(url: str, token: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as exc:
        with contextlib.closing(exc):
            return exc.code, exc.read(), dict(exc.headers)


@pytest.fixture
def everywhere(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path, extra={"controller.listen": "0.0.0.0:0"})
    yield c
    c.running.stop()


def test_on_loopback_metrics_and_reads_are_open(controller: Controller) -> None:
    code, body, _ = status(controller.url + "/metrics")
    assert code == 200 and b"fleetguard_controller" in body
    assert status(controller.url + "/v1/hosts")[0] == 200


def test_off_loopback_metrics_and_reads_need_an_operator_token(everywhere: Controller) -> None:
    # Reached through the machine's own non-loopback address when it has one: what a scraper elsewhere sees.
    # (The rule is the listen address's, so a client on 127.0.0.1 of a 0.0.0.0 controller is asked too.)
    host = a_non_loopback_address() or "127.0.0.1"
    base = f"http://{host}:{everywhere.running.port}"
    operator, agent = everywhere.tokens["operator"], everywhere.tokens["node-a"]
    reads: tuple[str, ...] = ("/metrics", "/v1/hosts", "/v1/fleet", "/v1/findings", "/v1/hosts/node-a")
    reads += ("/v1/repairs", "/v1/models")
    for path in reads:
        code, body, _ = status(base + path)
        assert code == 401 and b"operator token" in body, path
        assert status(base + path, "not-a-token")[0] == 401, path
        assert status(base + path, agent)[0] == 403, path  # one host's token does not read the fleet
    code, body, headers = status(base + "/metrics", operator)
    assert code == 200 and b"fleetguard_controller" in body
    assert headers["Content-Type"].startswith("text/plain")
    assert status(base + "/v1/hosts", operator)[0] == 200
    code, body, _ = status(base + "/v1/repairs?since_seconds=3600", operator)
    assert code == 200 and json.loads(body) == {"since_seconds": 3600.0, "faults": [], "out": []}
    # HEAD is a GET for the rule too.
    request = urllib.request.Request(base + "/metrics", method="HEAD")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    refused.value.close()
    assert refused.value.code == 401
