"""The one interface every signal source implements, real or simulated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from fleetguard.records.telemetry import Batch


@runtime_checkable
class Collector(Protocol):
    """A signal source the agent samples.

    `collect` never raises for bad input from the system (unreadable file, garbage line, GPU lost): it skips
    it, counts it in `problems()`, and reports what matters as an Event.
    """

    name: str

    def collect(self, now: float) -> Batch:
        """Read the source once (or drain what is pending, for streams) and stamp records with `now`."""

    def problems(self) -> Mapping[str, int]:
        """Cumulative counts of skipped input by reason, e.g. {"garbage_value": 3}; exported to /metrics."""

    def close(self) -> None: ...


class CollectorUnavailable(Exception):
    """The source does not exist on this host (no NVIDIA driver, no /sys/class/infiniband, no /dev/kmsg).

    The message is for an operator: one sentence saying what is missing and what to do.
    """
