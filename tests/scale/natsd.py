"""A real nats-server with JetStream on loopback for the scale tests: a random port, a temporary store
directory, one NATS user per host (publish only on its own subject, pull only its own command consumer,
read its pool's wire advertisement) and one for the controllers."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetguard.shipping.nats_subjects import (
    advert_stream,
    command_consumer,
    command_stream,
    host_token,
    subject_for,
)

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
CONTROLLER_USER = "controller"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_nats_server() -> None:
    if not Path(NATS_SERVER).exists():
        pytest.fail("nats-server is not installed (make system-deps installs Debian's nats-server)")


@dataclass
class NatsServer:
    root: Path
    hosts: dict[str, str]  # host -> pool
    port: int = field(default_factory=free_port)
    passwords: dict[str, str] = field(default_factory=dict)
    advert_reads: bool = True  # False: host users as configured before the wire was negotiated over NATS
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        for user in [CONTROLLER_USER, *self.hosts]:
            self.passwords[user] = secrets.token_urlsafe(16)
            path = self.password_file(user)
            path.write_text(self.passwords[user])
            path.chmod(0o600)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def password_file(self, user: str) -> Path:
        return self.root / f"nats-{user}.password"

    def config_text(self) -> str:
        users = [
            {
                "user": CONTROLLER_USER,
                "password": self.passwords[CONTROLLER_USER],
                "permissions": {
                    "publish": ["$JS.API.>", "$JS.ACK.>", "fleetguard.*.cmd.*", "$KV.>"],
                    "subscribe": ["_INBOX.>"],
                },
            }
        ]
        for host, pool in self.hosts.items():
            users.append(
                {
                    "user": host,
                    "password": self.passwords[host],
                    "permissions": {
                        # its own subject; pulling from and acking on its own command consumer only
                        "publish": [
                            subject_for(pool, host),
                            f"$JS.API.CONSUMER.MSG.NEXT.{command_stream(pool)}.{command_consumer(host)}",
                            f"$JS.ACK.{command_stream(pool)}.{command_consumer(host)}.>",
                            # reading which wire versions the pool's controller reads
                            *(
                                [
                                    f"$JS.API.STREAM.INFO.{advert_stream(pool)}",
                                    f"$JS.API.STREAM.MSG.GET.{advert_stream(pool)}",
                                ]
                                if self.advert_reads
                                else []
                            ),
                        ],
                        "subscribe": [f"_INBOX.{host_token(host)}.>"],
                    },
                }
            )
        # The config format accepts JSON; strings are quoted, so passwords need no escaping of their own.
        return (
            f"listen: 127.0.0.1:{self.port}\n"
            f"jetstream {{ store_dir: {json.dumps(str(self.root / 'jetstream'))}, "
            "max_memory_store: 64MB, max_file_store: 1GB }\n"
            "max_payload: 8MB\n"
            f"authorization {{ users: {json.dumps(users)} }}\n"
        )

    def start(self) -> None:
        config = self.root / "nats-server.conf"
        config.write_text(self.config_text())
        log = (self.root / "nats-server.log").open("ab")
        self.proc = subprocess.Popen([NATS_SERVER, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.root / "nats-server.log").read_text())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)  # polling a real nats-server starting: it offers no event to wait on
        raise TimeoutError("nats-server did not start")

    def reload(self) -> None:
        """Write the config again (after a change to, say, `advert_reads`) and have the running server read
        it (SIGHUP): its users' permissions change under their open connections."""
        assert self.proc is not None
        (self.root / "nats-server.conf").write_text(self.config_text())
        self.proc.send_signal(signal.SIGHUP)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


def wait_for(
    condition: Callable[[], bool], timeout: float = 60, step: Callable[[], object] | None = None
) -> None:
    """Until `condition()` holds (`step()` between looks), or an AssertionError after `timeout` seconds.
    Polling: a real NATS server and its clients offer no event to wait on."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        if step is not None:
            step()
        time.sleep(0.05)
