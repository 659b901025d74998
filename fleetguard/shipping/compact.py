"""What is worth shipping: a NIC counter that did not move, or a port whose state did not change, costs
nothing: its last shipped row still says it. A keyframe every `keyframe_seconds` keeps every series present
in any window the controller keeps (retention, rollups), and the first reading (or one after a reset) is
always shipped.

This is where ~95% of an 8-GPU, 8-port host's rows go: 168 counters a second, of which ~40 move."""

from __future__ import annotations

from collections.abc import Iterable

from fleetguard.records.telemetry import NicCounterSample, NicSample

DEFAULT_KEYFRAME_SECONDS = 3600.0
MAX_SERIES = 100_000  # a host with more counter series than this ships them all (no state kept)


class Compactor:
    def __init__(self, keyframe_seconds: float = DEFAULT_KEYFRAME_SECONDS) -> None:
        self.keyframe_seconds = keyframe_seconds
        self._counter_shipped: dict[tuple[str, int, str, str], float] = {}
        self._port_shipped: dict[tuple[str, int], tuple[float, tuple[object, ...]]] = {}
        self.skipped = 0

    def keep(self, records: Iterable[object]) -> list[object]:
        out: list[object] = []
        for record in records:
            if isinstance(record, NicCounterSample):
                if self._counter_changed(record):
                    out.append(record)
                    continue
            elif isinstance(record, NicSample):
                if self._port_changed(record):
                    out.append(record)
                    continue
            else:
                out.append(record)
                continue
            self.skipped += 1
        return out

    def _counter_changed(self, c: NicCounterSample) -> bool:
        key = (c.device, c.port, c.group, c.counter)
        last = self._counter_shipped.get(key)
        moved = c.delta is None or c.delta != 0 or c.reset
        if moved or last is None or c.ts - last >= self.keyframe_seconds:
            if len(self._counter_shipped) < MAX_SERIES or key in self._counter_shipped:
                self._counter_shipped[key] = c.ts
            return True
        return False

    def _port_changed(self, p: NicSample) -> bool:
        key = (p.device, p.port)
        state = (p.state, p.phys_state, p.rate_gbps, p.link_layer)
        last = self._port_shipped.get(key)
        if last is None or last[1] != state or p.ts - last[0] >= self.keyframe_seconds:
            if len(self._port_shipped) < MAX_SERIES or key in self._port_shipped:
                self._port_shipped[key] = (p.ts, state)
            return True
        return False
