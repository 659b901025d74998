"""Watches the PIDs of local ranks and reports each exit once, well within a second.

A pidfd (Linux >= 5.3) wakes the watcher the moment a process exits, so the first rank to die is reported
before torchrun tears down the others; where pidfds are unavailable /proc is polled every
`poll_interval_seconds`. A zombie counts as exited (its parent has simply not reaped it yet). Its exit code
comes from the pidfd where the kernel keeps it (Linux >= 6.15: even once the parent reaped it), else from
the zombie's /proc entry."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fleetguard.jobcontrol.procfs import pidfd_exit_code, read_stat

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProcessExit:
    pid: int
    key: tuple[str, int]  # (job_id, rank)
    # None when the process was reaped before /proc could say and the kernel keeps no exit for its pidfd
    exit_code: int | None


@dataclass
class _Watched:
    key: tuple[str, int]
    start_ticks: int | None
    pidfd: int | None


class PidWatcher:
    """`watch(pid, key)` from any thread; `on_exit(ProcessExit)` is called from the watcher thread."""

    def __init__(
        self,
        on_exit: Callable[[ProcessExit], None],
        poll_interval_seconds: float = 0.2,
        proc_root: str = "/proc",
        use_pidfd: bool = True,
    ) -> None:
        self.on_exit = on_exit
        self.poll_interval_seconds = poll_interval_seconds
        self.proc_root = proc_root
        self.use_pidfd = use_pidfd and hasattr(os, "pidfd_open") and hasattr(select, "poll")
        self.callback_errors = 0
        self._watched: dict[int, _Watched] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, key: tuple[str, int]) -> bool:
        """Start watching `pid` (no-op if already watched); False if it is already gone."""
        with self._lock:
            if pid in self._watched:
                return True
            state = read_stat(pid, self.proc_root)
            if state is None or state.state in ("Z", "X"):
                return False
            pidfd: int | None = None
            if self.use_pidfd:
                try:
                    pidfd = os.pidfd_open(pid)
                except OSError as exc:
                    log.debug("pidfd_open(%d) failed, polling it instead: %s", pid, exc)
            self._watched[pid] = _Watched(key, state.start_ticks, pidfd)
        with contextlib.suppress(OSError):  # after stop() there is nothing to wake
            os.write(self._wake_w, b"w")  # re-arm poll() with the new pidfd
        return True

    def unwatch(self, pid: int) -> None:
        with self._lock:
            watched = self._watched.pop(pid, None)
        if watched is not None and watched.pidfd is not None:
            os.close(watched.pidfd)

    def watched(self) -> dict[int, tuple[str, int]]:
        with self._lock:
            return {pid: w.key for pid, w in self._watched.items()}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-pid-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        os.write(self._wake_w, b"s")
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for watched in self._watched.values():
                if watched.pidfd is not None:
                    os.close(watched.pidfd)
            self._watched.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def check_once(self, timeout_seconds: float | None = 0.0) -> list[ProcessExit]:
        """Wait up to `timeout_seconds` (None: until a pidfd or `watch`/`stop` wakes it) for an exit, then
        report every watched process that has exited."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        with self._lock:
            for watched in self._watched.values():
                if watched.pidfd is not None:
                    poller.register(watched.pidfd, select.POLLIN)
        ready = poller.poll(None if timeout_seconds is None else timeout_seconds * 1000)
        if any(fd == self._wake_r for fd, _ in ready):
            os.read(self._wake_r, 4096)
        exits = self._collect_exits()
        for process_exit in exits:
            try:
                self.on_exit(process_exit)
            except Exception:
                self.callback_errors += 1
                log.exception("pid watcher: exit callback failed for pid %d", process_exit.pid)
        return exits

    def _collect_exits(self) -> list[ProcessExit]:
        exits: list[ProcessExit] = []
        with self._lock:
            for pid, watched in list(self._watched.items()):
                state = read_stat(pid, self.proc_root)
                reused = state is not None and state.start_ticks != watched.start_ticks
                if state is not None and not reused and state.state not in ("Z", "X"):
                    continue
                exit_code = state.exit_code if state is not None and not reused else None
                if watched.pidfd is not None:
                    # Its parent (torchrun, on its own schedule) may have reaped it before this look at
                    # /proc: the pidfd still says how it ended (Linux >= 6.15), and names this process
                    # whatever became of its pid since.
                    told = pidfd_exit_code(watched.pidfd)
                    exit_code = told if told is not None else exit_code
                exits.append(ProcessExit(pid, watched.key, exit_code))
                del self._watched[pid]
                if watched.pidfd is not None:
                    os.close(watched.pidfd)
        # Several exits in one round: a launcher's SIGTERM teardown follows the real failure, so report the
        # others first (dict order is registration order, which says nothing about who died first).
        exits.sort(key=lambda e: e.exit_code == -signal.SIGTERM)
        return exits

    def _wait_seconds(self) -> float | None:
        """How long a round may block: for ever while every watched pid has a pidfd (an idle agent then costs
        no wake-ups at all), the poll interval while /proc must be polled for one without."""
        with self._lock:
            polled = any(w.pidfd is None for w in self._watched.values())
        return self.poll_interval_seconds if polled else None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once(self._wait_seconds())
            except Exception:  # never let the watcher die: a missed exit is a missed crash
                log.exception("pid watcher round failed")
                self._stop.wait(self.poll_interval_seconds)
