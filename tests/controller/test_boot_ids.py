"""Agents' boot ids are for operators only: with another host's boot id, a host could forge the NATS message
ids of that host's batches (tests/scale/test_nats_auth.py has the attack). The read API leaves them out of
/v1/hosts, /v1/hosts/<host> and host_silent evidence unless the reader holds the operator token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.helpers import Controller, batch, start_test_controller


@pytest.fixture
def quick_silence(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path, extra={"controller.silent_after_seconds": 1.0})
    yield c
    c.running.stop()


def _silent_evidence(controller: Controller, token: str | None) -> dict[str, object]:
    found = controller.get("/v1/findings?since=0", token).doc["findings"]
    (silent,) = [f for f in found if f["kind"] == "host_silent"]
    evidence = silent["evidence"]
    assert isinstance(evidence, dict)
    return evidence


def test_boot_ids_are_served_to_operators_and_to_no_host(quick_silence: Controller) -> None:
    c = quick_silence
    assert c.ship(batch("node-a", 1, boot_id="secret-boot")).status == 200
    operator, host_b = c.tokens["operator"], c.tokens["node-b"]

    assert c.get("/v1/hosts", operator).doc["hosts"][0]["boot_id"] == "secret-boot"
    assert c.get("/v1/hosts/node-a", operator).doc["host"]["boot_id"] == "secret-boot"
    for token in (None, host_b):  # loopback without a token; another host's token
        (listed,) = c.get("/v1/hosts", token).doc["hosts"]
        assert listed["host"] == "node-a" and "boot_id" not in listed
        assert "boot_id" not in c.get("/v1/hosts/node-a", token).doc["host"]

    deadline = time.monotonic() + 60  # the silent-host check runs every 5 s
    while not any(
        f["kind"] == "host_silent" for f in c.get("/v1/findings?since=0", operator).doc["findings"]
    ):
        assert time.monotonic() < deadline, "no host_silent finding"
        time.sleep(0.2)  # polling a real controller's analysis: it offers no event to wait on
    assert _silent_evidence(c, operator)["boot_id"] == "secret-boot"
    for token in (None, host_b):
        evidence = _silent_evidence(c, token)
        assert "boot_id" not in evidence and evidence["last_seq"] == 1
    assert "secret-boot" not in str(c.get("/v1/hosts/node-a", host_b).doc)
