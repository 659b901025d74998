"""controller.tls_cert / tls_key: the agent ships over HTTPS; plain HTTP to a TLS port gets nowhere."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fleetguard.shipping.shipper import Shipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import encode
from tests.controller.helpers import batch, start_test_controller

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_an_agent_ships_over_https_trusting_the_controllers_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _self_signed(tmp_path)
    c = start_test_controller(
        tmp_path / "ctl", extra={"controller.tls_cert": str(cert), "controller.tls_key": str(key)}
    )
    try:
        spool = Spool(tmp_path / "spool", 1 << 20)
        spool.append(encode(batch("node-a", 1)))
        https = c.url.replace("http://", "https://")
        untrusting = Shipper(spool, https, c.tokens["node-a"], clock=time.monotonic)
        record = spool.oldest()
        assert record is not None
        untrusting.send(record)
        assert untrusting.stats.errors == 1 and spool.pending() == 1  # unknown CA: nothing sent
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusting = Shipper(spool, https, c.tokens["node-a"], clock=time.monotonic)
        assert trusting.send(record) == 0.0
        assert spool.pending() == 0 and trusting.stats.committed == 1
        plain = Shipper(spool, c.url, c.tokens["node-a"], clock=time.monotonic)
        spool.append(encode(batch("node-a", 2)))
        second = spool.oldest()
        assert second is not None
        plain.send(second)
        assert plain.stats.committed == 0
    finally:
        c.running.stop()
