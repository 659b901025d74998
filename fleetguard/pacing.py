"""A background thread's share of the interpreter, kept below a bound by resting between slices of its work.

Python gives its threads no priority over the one lock they share: a diagnosis round that needs 0.4 s of the
interpreter takes it in one stretch, beside the request handlers that answer the fleet's agents. At 2,048
hosts those handlers already need most of the interpreter, so each round left ~0.3 s of requests queued
behind it, every 5 s: the whole of the ingest p99. `os.nice` of the round's thread (controller/niceness.py)
does not help there, since the kernel's scheduler never sees who waits for the lock.

A `Pacer` is called at points where its thread's work may pause (between chunks of rows). Once the thread has
used `slice_seconds` of CPU since it last rested, it sleeps long enough that its CPU stays near `share` of
the wall clock; the round takes longer, and the handlers never wait behind more than a slice of it. Its rests
in one piece of work are bounded (`start(budget)`), so a round can be slowed but never held past its time;
`hurry` (at shutdown) ends a rest under way and every later one, so a stop never waits behind a resting round.
While `wanted()` says another thread waits for what the work holds (the controller's round holds the store's
lock: a command being queued waits on it, and so does a writer lane behind that), it does not rest at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SHARE = 0.25  # of the wall clock, while resting is within budget
SLICE_SECONDS = 0.004  # of the thread's CPU between rests: a handler waits behind at most about this
MAX_REST_SECONDS = 0.05  # one rest, whatever the slice took (a slice stretched by a long C call)


@dataclass
class Pacer:
    share: float = SHARE
    slice_seconds: float = SLICE_SECONDS
    max_rest_seconds: float = MAX_REST_SECONDS
    # What it reads and how it waits: the thread's own CPU clock and a sleep (a test's, in tests); None, a
    # wait that `hurry` ends.
    cpu_clock: Callable[[], float] = time.thread_time
    sleep: Callable[[float], None] | None = None
    # Whether another thread waits for what the work holds: no rest then (the work ends the sooner).
    wanted: Callable[[], bool] = lambda: False
    rested: float = 0.0  # in this piece of work (since `start`)
    _hurried: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _budget: float = field(default=0.0, init=False)
    _since: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"a pacer's share is in (0, 1], not {self.share}")

    def start(self, budget_seconds: float) -> None:
        """A new piece of work, which may rest for `budget_seconds` in all."""
        self._budget = max(0.0, budget_seconds)
        self.rested = 0.0
        self._since = self.cpu_clock()

    def rest(self) -> None:
        """Sleep if the thread has used a slice since its last rest (cheap when it has not)."""
        used = self.cpu_clock() - self._since
        if used < self.slice_seconds:
            return
        left = self._budget - self.rested
        if left > 0.0 and not self._hurried.is_set() and not self.wanted():
            pause = min(used * (1.0 - self.share) / self.share, self.max_rest_seconds, left)
            if self.sleep is None:
                self._hurried.wait(pause)
            else:
                self.sleep(pause)
            self.rested += pause
        self._since = self.cpu_clock()

    def hurry(self) -> None:
        """No more rests, from any thread (the work's owner is stopping): one under way ends now."""
        self._hurried.set()


def unpaced() -> None:
    """The pause point of work nobody paces."""
