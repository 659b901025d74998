"""The controller under Type=notify: a real `fleetguard controller` process tells a real AF_UNIX datagram
socket (standing in for systemd) READY=1 once it serves, and STOPPING=1 on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

from fleetguard.controller.tokens import add_token
from tests.controller.fleet_processes import free_port

FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))


def test_ready_once_serving_and_stopping_on_sigterm(tmp_path: Path) -> None:
    name = f"fleetguard-test-{uuid.uuid4().hex}"
    port = free_port()
    add_token(tmp_path / "tokens.json", "node-a")
    config = tmp_path / "controller.toml"
    config.write_text(
        f'[controller]\nlisten = "127.0.0.1:{port}"\ntokens_file = "{tmp_path}/tokens.json"\n'
        f'[store]\npath = "{tmp_path}/controller.duckdb"\n[dashboard]\nenabled = false\n'
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(60)
        proc = subprocess.Popen(
            [FLEETGUARD, "controller", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "NOTIFY_SOCKET": "@" + name},
        )
        try:
            ready = sock.recv(4096).decode()
            assert ready.splitlines()[0] == "READY=1"
            # READY means serving: the port answers now, without a retry loop.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
                assert reply.status == 200
            proc.send_signal(signal.SIGTERM)
            assert sock.recv(4096).decode() == "STOPPING=1"
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=60)
