"""Fixtures shared across the test folders, and the suite's leak check.

The leak check (enforced for every test; nothing opts out):

A test fails at teardown ("ERROR at teardown") if, once its fixtures are torn down and after a grace of
``LEAK_GRACE_S`` for things that are finishing, it leaves behind

- a thread (daemon or not) that was not running before its setup began;
- a process descended from the pytest process (direct or indirect: pytest is made a child subreaper, so a
  daemonised grandchild whose parent exited is still counted), including a zombie nobody reaped and a
  stopped (SIGSTOP) process.

So: stop and join every thread and server you start, wait for every child you spawn (``proc.wait()`` after
``kill()``), and for a process you SIGSTOP send SIGCONT, kill and wait in a ``finally`` or fixture teardown.
Resources made by a module-, class-, package- or session-scoped fixture are checked when that fixture is torn
down, not after every test that uses it, and so are the threads and processes that such a resource's own
threads and processes start later (a server's pool workers, a browser's renderers). The report names each
leak: thread name, the test or fixture that owns it and the code that called ``Thread.start``; process pid,
state and command line. Leaked processes are killed and reaped after they are reported, so one leak does not
spill into later tests.
The check itself is in tests/leak_check.py; its only exceptions are the commented entries in
``_ALLOWED_THREADS``/``_ALLOWED_PROCESSES`` there: process-wide singletons a library starts once and never
stops.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.store import Store
from tests.leak_check import (  # the leak check's hooks, found by pytest here
    pytest_configure,
    pytest_fixture_post_finalizer,
    pytest_fixture_setup,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)

__all__ = [
    "pytest_configure",
    "pytest_fixture_post_finalizer",
    "pytest_fixture_setup",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "store",
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store in a real DuckDB file, closed after the test."""
    s = Store.open(tmp_path / "fleet.duckdb")
    yield s
    s.close()
