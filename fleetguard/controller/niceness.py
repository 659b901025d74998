"""A lower CPU priority for the controller's background threads (the diagnosis rounds and periodic tasks, the
maintenance jobs) than for ingest.

Why: on a controller's few cores a diagnosis round at 2,048 hosts is ~0.5 s of CPU every 5 s; run at the
priority of the handler threads it took the cores from them and every round was a spike of the ingest
latency (BENCHMARKS.md, "Where the ingest p99 came from"). A round that runs a little longer is nothing to an
operator; a batch answered late is what the agents' spools see. Linux gives each thread its own nice value.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

BACKGROUND_NICENESS = 10  # added to the thread's own (never lowered: a nice controller stays as nice)
MAX_NICENESS = 19


def lower_this_thread(by: int = BACKGROUND_NICENESS) -> None:
    """Add `by` to the calling thread's nice value (capped at 19); where the platform has no per-thread
    priority, or refuses, the thread runs on as it was."""
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(MAX_NICENESS, now + by))
    except (AttributeError, OSError) as exc:  # not Linux, or not allowed
        log.debug("background thread priority left as it was: %s", exc)
