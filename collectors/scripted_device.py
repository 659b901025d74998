"""A `GpuDevice` that answers the readings it is given: the device behind generated histories
(fleetguard.incidents.simulated_history), whose values are drawn by the history's own seeded script rather
than by the physics of `collectors.simulated`. Samples of it are built, like every other, by
`collectors.gpu_sampling`."""

from __future__ import annotations

from collectors.gpu_device import FastReading, GpmReading, GpuIdentity, SlowReading


class ScriptedGpuDevice:
    """One GPU whose fast reading is set before each sample; it has no slow fields, energy counter or GPM
    (a history sampled every half hour records what an operator's dashboards keep, not every counter)."""

    __slots__ = ("_fast", "_identity")

    def __init__(self, identity: GpuIdentity) -> None:
        self._identity = identity
        self._fast = FastReading()

    def set_fast(self, reading: FastReading) -> None:
        """What the next `read_fast` answers."""
        self._fast = reading

    @property
    def identity(self) -> GpuIdentity:
        return self._identity

    @property
    def has_gpm(self) -> bool:
        return False

    def read_fast(self) -> FastReading:
        return self._fast

    def read_slow(self, *, pcie_throughput: bool) -> SlowReading:
        return SlowReading()

    def read_energy_joules(self) -> float | None:
        return None

    def read_gpm(self) -> GpmReading | None:
        return None

    def compute_pids(self) -> tuple[int, ...] | None:
        return None
