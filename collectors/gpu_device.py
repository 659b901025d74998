"""One GPU as the sampler sees it, real (NVML) or simulated: identity, and readings grouped by what they cost.

`GpuDevice` is the seam between where a reading comes from and how often it is taken: the NVML device
(collectors/nvml_device.py) and the simulated one (collectors/simulated.py) implement it, and
`collectors.gpu_sampling` decides the cadence and builds every `GpuSample` in one place.

A device method returns None for a field its GPU lacks and raises `collectors.nvml_query.GpuLost` when the GPU
itself is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What does not change while the GPU stays attached: read once."""

    index: int
    uuid: str
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width_max: int | None = None


@dataclass(frozen=True, slots=True)
class FastReading:
    """Fields the driver answers in 2-9 µs of CPU (H100): read every round."""

    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    performance_state: int | None = None
    clocks_event_reasons: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_corrected: int | None = None
    remapped_rows_uncorrected: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None


@dataclass(frozen=True, slots=True)
class SlowReading:
    """Fields that cost 35 µs to 1.5 ms of CPU each, or many calls (NVLink: 5 per link): read every slow
    interval. PCIe throughput is None when it was not asked (GPM supplies it, or it is switched off)."""

    pcie_replay_errors: int | None = None
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    violation_power_seconds: float | None = None
    violation_thermal_seconds: float | None = None
    nvlink_links_active: int | None = None
    nvlink_crc_flit_errors: int | None = None
    nvlink_crc_data_errors: int | None = None
    nvlink_replay_errors: int | None = None
    nvlink_recovery_errors: int | None = None


@dataclass(frozen=True, slots=True)
class GpmReading:
    """GPM profiling metrics over the interval between two samples (Hopper and later); None: not offered."""

    sm_activity_percent: float | None = None
    sm_occupancy_percent: float | None = None
    tensor_activity_percent: float | None = None
    dram_bandwidth_percent: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    nvlink_tx_bytes_per_second: float | None = None
    nvlink_rx_bytes_per_second: float | None = None


class GpuDevice(Protocol):
    """One attached GPU. Every read may raise GpuLost; none raises for a field the GPU lacks."""

    @property
    def identity(self) -> GpuIdentity: ...

    @property
    def has_gpm(self) -> bool:
        """GPM profiling metrics are offered (Hopper and later, on a driver that has them)."""

    def read_fast(self) -> FastReading: ...

    def read_slow(self, *, pcie_throughput: bool) -> SlowReading:
        """`pcie_throughput=False` skips nvmlDeviceGetPcieThroughput (2 calls of 0.76 ms CPU, 21 ms wall)."""

    def read_energy_joules(self) -> float | None:
        """The driver's cumulative energy counter (nvmlDeviceGetTotalEnergyConsumption: ~3.9 ms CPU, H100)."""

    def read_gpm(self) -> GpmReading | None:
        """Take a GPM sample; the metrics since the previous one, or None (no GPM, or the first sample)."""

    def compute_pids(self) -> tuple[int, ...] | None:
        """Pids of the compute processes using this GPU (host pid namespace); None when it cannot be read."""


@dataclass(frozen=True, slots=True)
class GpuProcesses:
    """The compute processes on one GPU at one round (nvmlDeviceGetComputeRunningProcesses: ~7 µs)."""

    uuid: str
    gpu_index: int
    pci_bus_id: str | None
    pids: tuple[int, ...]  # host pid namespace, sorted
