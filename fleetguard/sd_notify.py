"""systemd's readiness and watchdog protocol (sd_notify(3)), in the stdlib: one AF_UNIX datagram per state to
the socket named by $NOTIFY_SOCKET.

Under `Type=notify` systemd waits for READY=1 before it counts the service as started; with `WatchdogSec=` it
sets $WATCHDOG_USEC and restarts the service when no WATCHDOG=1 arrives within that time. The agent sends
WATCHDOG=1 from its sampling loop only (`WatchdogPinger.on_round`), so a loop stalled in a hung driver call or
a deadlock stops the pings and systemd restarts the agent; a thread that merely stays alive proves nothing.

Without $NOTIFY_SOCKET (not under systemd, or not Type=notify) every call does nothing. The variables are
removed from the environment once read, so commands the agent runs (restart_command, cordon_command) cannot
speak for it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Ping at this fraction of the watchdog time: systemd's advice is half; a quarter leaves room for one slow
# round without a restart.
PING_FRACTION = 0.25


@dataclass
class Notifier:
    address: str  # a path, or "\0name" for an abstract socket (systemd writes "@name")
    watchdog_seconds: float | None  # None: no WatchdogSec, no pings
    _sock: socket.socket | None = field(default=None, repr=False)
    _failed: bool = False

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None) -> Notifier | None:
        env = os.environ if environ is None else environ
        target = env.pop("NOTIFY_SOCKET", "")
        usec_text = env.pop("WATCHDOG_USEC", "")
        pid_text = env.pop("WATCHDOG_PID", "")
        if not target or not (target.startswith(("/", "@"))):
            return None
        watchdog = _watchdog_seconds(usec_text, pid_text)
        return cls("\0" + target[1:] if target.startswith("@") else target, watchdog)

    def send(self, state: str) -> bool:
        """Send one state line; a failure is logged once and never raised (systemd gone is not our fault)."""
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(state.encode(), self.address)
        except OSError as exc:
            if not self._failed:
                log.warning("cannot tell systemd %s through %r: %s", state, self.address, exc)
                self._failed = True
            return False
        return True

    def ready(self, status: str = "") -> None:
        self.send("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _watchdog_seconds(usec_text: str, pid_text: str) -> float | None:
    if not usec_text:
        return None
    if pid_text and pid_text != str(os.getpid()):
        return None  # the watchdog is another process's (we were started by it, not by systemd)
    try:
        usec = int(usec_text)
    except ValueError:
        log.warning("WATCHDOG_USEC=%r is not a number of microseconds; no watchdog pings", usec_text[:40])
        return None
    if not 0 < usec <= 10**13:
        log.warning("WATCHDOG_USEC=%d is out of range; no watchdog pings", usec)
        return None
    return usec / 1e6


@dataclass
class WatchdogPinger:
    """Sends WATCHDOG=1 after a sampling round, at most every PING_FRACTION of the watchdog time."""

    notifier: Notifier
    monotonic: Callable[[], float] = time.monotonic
    _last: float | None = None

    @property
    def interval(self) -> float:
        assert self.notifier.watchdog_seconds is not None
        return self.notifier.watchdog_seconds * PING_FRACTION

    def on_round(self) -> None:
        now = self.monotonic()
        if self._last is None or now - self._last >= self.interval:
            self.notifier.send("WATCHDOG=1")
            self._last = now


def slow_rounds_warning(watchdog_seconds: float, sample_interval_seconds: float) -> str | None:
    """A line for the operator when rounds come too seldom for the watchdog: a healthy agent would be
    restarted."""
    if sample_interval_seconds * 2 < watchdog_seconds:
        return None
    return (
        f"agent.sample_interval_seconds {sample_interval_seconds:g} is not well under the unit's WatchdogSec "
        f"({watchdog_seconds:g} s): systemd may restart a healthy agent; raise WatchdogSec"
    )
