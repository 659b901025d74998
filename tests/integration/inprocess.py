"""`fleetguard up` in the test process, on a FakeClock: the same daemon the command line runs (real store,
real /metrics server, real loops and threads), driven round by round as the test moves time."""

from __future__ import annotations

import contextvars
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetguard.agent.daemon_deps import DaemonDeps, StopSwitch
from fleetguard.clock import FakeClock
from fleetguard.config import Config
from fleetguard.embedded import run_embedded

# Real seconds one step may take before the test fails: a loop that never returns to its wait is stuck. The
# first step of a run without a model includes training the demo model (minutes on a loaded 2-core machine).
STEP_TIMEOUT_SECONDS = 240.0


@dataclass
class InProcessUp:
    """`run_embedded(config, duration_seconds=...)` on a thread of its own; `run` moves its clock."""

    config: Config
    duration_seconds: float
    clock: FakeClock = field(default_factory=FakeClock)
    switch: StopSwitch = field(default_factory=StopSwitch)
    out: io.StringIO = field(default_factory=io.StringIO)
    exit_code: int | None = None
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        deps = DaemonDeps.on_clock(self.clock, self.switch)

        def run() -> None:
            try:
                self.exit_code = run_embedded(
                    self.config, duration_seconds=self.duration_seconds, out=self.out, deps=deps
                )
            except BaseException as exc:  # handed to the test by join()
                self.error = exc

        # In the test's context, as `up` runs on its main thread: a new thread starts with no context
        # variables, and Dash (imported by pytest's dash plugin, on the main thread) keeps its page registry
        # behind one, so a dashboard started without it cannot register its pages.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(run,), name="test-up", daemon=True)
        self._thread.start()

    def run(self, step_seconds: float, loops: int) -> None:
        """Move the clock `step_seconds` at a time until the daemon's --duration ends it; before each move,
        wait until its `loops` clock-driven loops (agent, duration timer, scoring, incidents) are idle, so
        every round a real run would have made at that time is made."""
        assert self._thread is not None
        deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
        while self._thread.is_alive():
            try:
                # in short waits, so that a daemon whose --duration has passed (its loops ending, never idle
                # again) is seen to have stopped
                self.clock.wait_until_idle(loops, 0.5)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                continue
            self.clock.advance(step_seconds)
            deadline = time.monotonic() + STEP_TIMEOUT_SECONDS

    def run_until(
        self, condition: Callable[[], bool], step_seconds: float, loops: int, max_clock_seconds: float
    ) -> bool:
        """Like `run`, until `condition` holds between two steps (or `max_clock_seconds` of the clock have
        passed: False)."""
        assert self._thread is not None
        start = self.clock.monotonic()
        while self.clock.monotonic() - start < max_clock_seconds:
            assert self._thread.is_alive(), "fleetguard up stopped:\n" + self.out.getvalue()
            self.clock.wait_until_idle(loops, STEP_TIMEOUT_SECONDS)
            if condition():
                return True
            self.clock.advance(step_seconds)
        return False

    def stop(self) -> None:
        """Stop it (as SIGTERM would) if still running, and wait for the final flush."""
        if self._thread is None:
            return
        self.switch.stop()
        self._thread.join(STEP_TIMEOUT_SECONDS)
        assert not self._thread.is_alive(), "fleetguard up did not stop:\n" + self.out.getvalue()
        if self.error is not None:
            raise self.error
