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

import hashlib
import importlib
import os
import shutil
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
    "demo_model",
    "pytest_configure",
    "pytest_fixture_post_finalizer",
    "pytest_fixture_setup",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "store",
]

REPO = Path(__file__).resolve().parent.parent
# What the demo model is a function of, besides its seed: the code that draws its history and trains it, and
# the libraries that compute it. A change to any of them trains it again.
_DEMO_MODEL_SOURCES = ("predictor", "fleetguard/predict")
_DEMO_MODEL_LIBRARIES = ("xgboost", "sklearn", "numpy", "pandas", "pyarrow", "duckdb")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store in a real DuckDB file, closed after the test."""
    s = Store.open(tmp_path / "fleet.duckdb")
    yield s
    s.close()


def _demo_model_key() -> str:
    digest = hashlib.sha256()
    for folder in _DEMO_MODEL_SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name in _DEMO_MODEL_LIBRARIES:
        version = getattr(importlib.import_module(name), "__version__", "?")
        digest.update(f"{name}=={version}\0".encode())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def demo_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model `up --simulate` trains at start-up (seed 0), trained once per session for every test
    that hands `up` or `predict` a model, and kept in pytest's cache between sessions under a key of its
    sources and libraries: training is deterministic under its seed (tests/predictor/test_predictor_store.py
    checks it for the hourly shape), and takes a minute or more of a loaded 2-core machine."""
    from fleetguard.predict.demo_model import train_demo_model

    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    if cache is None:
        return train_demo_model(tmp_path_factory.mktemp("demo") / "model", seed=0)
    kept = Path(cache.mkdir(f"demo-model-{_demo_model_key()}")) / "model"
    if not kept.is_dir():
        trained = train_demo_model(tmp_path_factory.mktemp("demo") / "model", seed=0)
        partial = kept.with_name(f"model.partial-{os.getpid()}")  # one per session: two may train at once
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(trained, partial)
        try:
            partial.rename(kept)  # whole or absent: a session stopped mid-copy leaves no half a model
        except OSError:  # another session kept the same model first
            shutil.rmtree(partial, ignore_errors=True)
    return kept
