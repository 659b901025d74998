"""A controller on loopback for each test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.fleet_processes import Fleet, free_port
from tests.controller.helpers import Controller, start_test_controller


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path)
    yield c
    c.running.stop()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Real controller and agent processes; whatever is still running at the end is killed."""
    f = Fleet(tmp_path, free_port())
    yield f
    f.cleanup()
