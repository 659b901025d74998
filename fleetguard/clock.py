"""Time as a dependency: code that waits or measures takes a Clock, so tests use FakeClock and never sleep."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock UTC epoch seconds, for timestamps."""

    def monotonic(self) -> float:
        """Monotonic seconds, for schedules and timeouts."""

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until `event` is set or `seconds` have passed on this clock; True if the event is set. Loops
        that pause between rounds wait here, so that on a FakeClock they run when the test moves time."""


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


# A threading.Event cannot notify the FakeClock's condition when it is set, so a waiter looks at its event
# again this often (real seconds); the clock moving wakes it at once.
_EVENT_LOOK_SECONDS = 0.01


class FakeClock:
    """A clock that only moves when told to; `sleep` advances it instantly (so only single-threaded code
    may sleep on it). Threads that `wait` on it block until a test `advance`s it past their deadline: a
    daemon on a FakeClock runs round by round as the test moves time, and `wait_until_idle` tells when every
    loop has finished the round the last move started."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start
        self._mono = 0.0
        self._moved = threading.Condition()
        self._deadlines: dict[int, float] = {}  # thread id -> monotonic deadline, for threads in wait()

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        with self._moved:
            self._wall += seconds
            self._mono += seconds
            self._moved.notify_all()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        me = threading.get_ident()
        with self._moved:
            deadline = self._mono + max(0.0, seconds)
            self._deadlines[me] = deadline
            self._moved.notify_all()  # a test in wait_until_idle counts this thread as idle now
            try:
                while not event.is_set() and self._mono < deadline:
                    self._moved.wait(_EVENT_LOOK_SECONDS)
            finally:
                del self._deadlines[me]
                self._moved.notify_all()
        return event.is_set()

    def idle(self, threads: int) -> bool:
        """Whether at least `threads` threads wait on this clock, each for a time still ahead of it."""
        with self._moved:
            return self._idle(threads)

    def _idle(self, threads: int) -> bool:
        ahead = [d for d in self._deadlines.values() if d > self._mono]
        return len(ahead) >= threads and len(ahead) == len(self._deadlines)

    def wait_until_idle(self, threads: int, timeout_seconds: float) -> None:
        """Block (real time) until `threads` threads wait on this clock for a time still ahead: every loop
        has done what the last `advance` made due. AssertionError after `timeout_seconds` (a stuck loop)."""
        with self._moved:
            if not self._moved.wait_for(lambda: self._idle(threads), timeout_seconds):
                waiting, after = len(self._deadlines), timeout_seconds
                raise AssertionError(f"{waiting} of {threads} threads wait on the clock after {after} s")
