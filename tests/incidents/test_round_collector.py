"""The diagnosis round holds Python's cyclic collector off while it runs and gives it back as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from fleetguard.incidents.rounds import collector_paused


@pytest.fixture
def collector_state() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_state")
def test_the_collector_is_off_during_the_round_and_on_after() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_a_round_that_raises_still_gives_the_collector_back() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a bad round")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_a_process_running_without_the_collector_keeps_it_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
