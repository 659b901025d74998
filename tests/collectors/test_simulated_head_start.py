"""`[simulate] head_start_seconds`: the simulated fleet starts as if it had run that long, so the scripted
faults due by then are in its very first samples, while every sample is still stamped with the agent's own
clock (a test or a short demo sees incidents at once, and nothing lands in the past)."""

from __future__ import annotations

import pytest

from fleetguard.agent.sources import build_sources
from fleetguard.clock import FakeClock
from fleetguard.config import ConfigError, load_config
from fleetguard.records.telemetry import Batch, EventKind

NOW = 1_700_000_000.0


def _first_round(head_start: float) -> Batch:
    config = load_config(
        env={},
        overrides={"simulate.fleet": "1x8", "simulate.seed": 3, "simulate.head_start_seconds": head_start},
    )
    sources = build_sources(config, clock=FakeClock(NOW))
    batch = Batch()
    for collector in sources.collectors:
        batch.extend(collector.collect(NOW))
    return batch


def test_a_head_start_puts_the_faults_due_by_then_in_the_first_samples() -> None:
    late = _first_round(45.0)  # the demo script's XID storm begins 40 s in
    assert any(e.kind is EventKind.XID for e in late.events)
    assert {s.ts for s in late.gpu_samples} == {NOW}  # stamped now, not back in the head start
    assert not any(e.kind is EventKind.XID for e in _first_round(0.0).events)  # the default: none yet


def test_a_head_start_out_of_range_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match="head_start_seconds"):
        load_config(env={}, overrides={"simulate.head_start_seconds": -5.0})
