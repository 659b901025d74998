"""The controller's background threads run at a lower CPU priority than its handler threads and lanes."""

from __future__ import annotations

import os
import threading

from fleetguard.clock import SystemClock
from fleetguard.controller.ingest import IngestWriter
from fleetguard.controller.niceness import BACKGROUND_NICENESS, MAX_NICENESS, lower_this_thread
from fleetguard.controller.stats import ControllerStats
from fleetguard.store import Store


def _nice_of(thread: threading.Thread) -> int:
    assert thread.native_id is not None
    return os.getpriority(os.PRIO_PROCESS, thread.native_id)


def test_a_lowered_thread_is_nicer_by_the_step_and_the_others_are_not() -> None:
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: list[int] = []
    done = threading.Event()

    def body() -> None:
        lower_this_thread()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        lower_this_thread()  # again: capped at 19, never past it
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        done.set()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=10)
    assert done.is_set()
    assert seen == [
        min(MAX_NICENESS, base + BACKGROUND_NICENESS),
        min(MAX_NICENESS, base + 2 * BACKGROUND_NICENESS),
    ]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base, "the caller's own is untouched"


def test_the_writers_task_thread_runs_nicer_than_its_lanes() -> None:
    store = Store.open(":memory:")
    writer = IngestWriter(store, SystemClock(), ControllerStats())
    writer.start()
    try:
        threads = {t.name: t for t in threading.enumerate()}
        tasks, lane = threads["fleetguard-writer-tasks"], threads["fleetguard-ingest-0"]
        deadline = 50
        while _nice_of(tasks) == _nice_of(lane) and deadline:  # set first thing on the thread
            threading.Event().wait(0.01)
            deadline -= 1
        assert _nice_of(tasks) == min(MAX_NICENESS, _nice_of(lane) + BACKGROUND_NICENESS)
    finally:
        writer.stop()
        store.close()
