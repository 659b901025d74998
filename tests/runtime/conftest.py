"""Fixtures for the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.helpers import reaped_sleepers


@pytest.fixture(autouse=True)
def _sleepers_reaped() -> Iterator[None]:
    yield from reaped_sleepers()
