"""Counters that did not move and ports that did not change are not shipped, except as hourly keyframes."""

from __future__ import annotations

from fleetguard.records.telemetry import GpuSample, NicCounterSample, NicSample
from fleetguard.shipping.compact import Compactor


def _counter(ts: float, value: int, delta: int | None, reset: bool = False) -> NicCounterSample:
    return NicCounterSample(ts, "h", "mlx5_0", 1, "symbol_error", "counters", value, delta, None, reset)


def test_a_counter_is_shipped_first_when_it_moves_and_hourly_otherwise() -> None:
    c = Compactor(keyframe_seconds=3600)
    kept = c.keep(
        [
            _counter(0, 5, None),  # first reading
            _counter(1, 5, 0),
            _counter(2, 6, 1),  # moved
            _counter(3, 6, 0),
            _counter(3601, 6, 0),  # an hour after the last shipped one... (2 + 3600 > 3601: not yet)
            _counter(3602, 6, 0),  # keyframe
            _counter(3603, 0, None, reset=True),
        ]
    )
    assert [r.ts for r in kept if isinstance(r, NicCounterSample)] == [0, 2, 3602, 3603]
    assert c.skipped == 3


def test_a_port_is_shipped_when_its_state_changes() -> None:
    c = Compactor()
    up = NicSample(0, "h", "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
    down = NicSample(2, "h", "mlx5_0", 1, "DOWN", "Polling", 400.0, "InfiniBand")
    kept = c.keep([up, NicSample(1, "h", "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand"), down])
    assert kept == [up, down]


def test_other_records_always_pass() -> None:
    gpu = GpuSample(0, "h", 0, "GPU-x")
    assert Compactor().keep([gpu, gpu]) == [gpu, gpu]
