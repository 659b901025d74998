"""sd_notify against a real AF_UNIX datagram socket standing in for systemd: READY=1 once the agent serves,
WATCHDOG=1 only while its sampling loop completes rounds, STOPPING=1 on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.agent.agent import Agent, RoundReport, Schedule
from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import SystemClock
from fleetguard.records.telemetry import Batch
from fleetguard.sd_notify import Notifier, WatchdogPinger, slow_rounds_warning
from fleetguard.store import Store
from tests.agent.fakes import ScriptedCollector
from tests.integration.daemon import Daemon


@pytest.fixture
def systemd() -> Iterator[tuple[str, socket.socket]]:
    """A bound datagram socket at an abstract address (as systemd's "@..." NOTIFY_SOCKET), and that name."""
    name = f"fleetguard-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    yield "@" + name, sock
    sock.close()


def receive(sock: socket.socket, until: float) -> tuple[float, str] | None:
    """The next datagram and when it came, or None at `until` (monotonic)."""
    left = until - time.monotonic()
    if left <= 0:
        return None
    sock.settimeout(left)
    try:
        data = sock.recv(4096)
    except TimeoutError:
        return None
    return time.monotonic(), data.decode()


def test_a_real_agent_says_ready_pings_while_sampling_and_says_stopping(
    tmp_path: Path, systemd: tuple[str, socket.socket]
) -> None:
    address, sock = systemd
    daemon = Daemon(
        ["agent", "--simulate", "1x2", "--no-faults"],
        tmp_path,
        env={
            "NOTIFY_SOCKET": address,
            "WATCHDOG_USEC": "2000000",  # WatchdogSec=2: a ping at most every 0.5 s
            "FLEETGUARD_AGENT_SAMPLE_INTERVAL_SECONDS": "0.1",
        },
    )
    try:
        first = receive(sock, time.monotonic() + 30)
        assert first is not None and first[1].splitlines()[0] == "READY=1"
        assert f"/metrics on port {daemon.port}" in first[1]
        # Pings for a 4 s window: some, while rounds run every 0.1 s, but at most one per 0.5 s (counted
        # over the window: under load two datagrams may be read back to back).
        pings = []
        window_end = time.monotonic() + 4.0
        while (got := receive(sock, window_end)) is not None:
            pings.append(got[1])
        rounds = daemon.metrics()["fleetguard_agent_rounds_total"]
        assert set(pings) == {"WATCHDOG=1"}
        assert 2 <= len(pings) <= 4.0 / 0.5 + 2
        assert len(pings) < rounds  # not one per round
        daemon.proc.send_signal(signal.SIGTERM)
        messages = []
        while (got := receive(sock, time.monotonic() + 30)) is not None and got[1] != "STOPPING=1":
            messages.append(got[1])
        assert got is not None and got[1] == "STOPPING=1"
        assert set(messages) <= {"WATCHDOG=1"}
        daemon.proc.communicate(timeout=60)
        assert daemon.proc.returncode == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.communicate(timeout=60)


class GatedCollector(ScriptedCollector):
    """Blocks inside collect() while the gate is closed: a sampling loop stuck in a hung driver call."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.stuck = threading.Event()

    def collect(self, now: float) -> Batch:
        if not self.gate.is_set():
            self.stuck.set()
            self.gate.wait(30)
        return super().collect(now)


def test_pings_stop_while_the_sampling_loop_is_stuck_and_resume_after(
    store: Store, systemd: tuple[str, socket.socket]
) -> None:
    address, sock = systemd
    notifier = Notifier("\0" + address[1:], watchdog_seconds=0.4)  # a ping at most every 0.1 s
    pinger = WatchdogPinger(notifier)
    collector = GatedCollector()

    def on_round(_report: RoundReport) -> None:
        pinger.on_round()

    agent = Agent(
        [collector],
        WriteBuffer(store),
        MetricsState(),
        SystemClock(),
        schedule=Schedule(sample_interval_seconds=0.02, flush_interval_seconds=0.5),
        on_round=on_round,
    )
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), name="agent-loop")
    loop.start()
    try:
        assert receive(sock, time.monotonic() + 10) is not None  # sampling: pings come
        collector.gate.clear()
        assert collector.stuck.wait(10)
        while receive(sock, time.monotonic() + 0.05) is not None:
            pass  # a ping sent just before the loop got stuck
        assert receive(sock, time.monotonic() + 1.0) is None  # 2.5 watchdog times: systemd would restart
        collector.gate.set()
        resumed = receive(sock, time.monotonic() + 10)
        assert resumed is not None and resumed[1] == "WATCHDOG=1"
    finally:
        collector.gate.set()
        stop.set()
        loop.join(30)
        agent.shutdown()
        notifier.close()
    assert not loop.is_alive()


def test_the_environment_is_read_once_and_removed() -> None:
    env = {"NOTIFY_SOCKET": "@sd", "WATCHDOG_USEC": "30000000", "OTHER": "x"}
    notifier = Notifier.from_environment(env)
    assert notifier is not None and notifier.address == "\0sd" and notifier.watchdog_seconds == 30.0
    assert env == {"OTHER": "x"}  # commands the agent runs cannot speak for it
    assert Notifier.from_environment({}) is None
    assert Notifier.from_environment({"NOTIFY_SOCKET": "relative"}) is None
    path = Notifier.from_environment({"NOTIFY_SOCKET": "/run/systemd/notify"})
    assert path is not None and path.address == "/run/systemd/notify" and path.watchdog_seconds is None
    other = Notifier.from_environment({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "5", "WATCHDOG_PID": "1"})
    assert other is not None and other.watchdog_seconds is None  # pid 1's watchdog, not ours
    mine = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "5000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier.from_environment(mine) == Notifier("\0x", 5.0)
    for bad in ("soon", "0", "-1", "99999999999999999"):
        parsed = Notifier.from_environment({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": bad})
        assert parsed is not None and parsed.watchdog_seconds is None


def test_a_vanished_notify_socket_is_logged_once_not_raised(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "gone.sock"), None)
    assert notifier.send("READY=1") is False
    assert notifier.send("STOPPING=1") is False
    notifier.close()


def test_rounds_too_slow_for_the_watchdog_are_warned_about() -> None:
    assert slow_rounds_warning(30.0, 1.0) is None
    warning = slow_rounds_warning(30.0, 20.0)
    assert warning is not None and "WatchdogSec" in warning
