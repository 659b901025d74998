"""Fixtures shared across the test folders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store in a real DuckDB file, closed after the test."""
    s = Store.open(tmp_path / "fleet.duckdb")
    yield s
    s.close()
