"""Records the collectors produce: GPU samples, NIC port samples and counters, and fault events."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One NVML reading of one GPU. Each field names the pynvml call it comes from; None = not supported."""

    ts: float
    host: str
    gpu_index: int
    uuid: str  # nvmlDeviceGetUUID
    name: str | None = None  # nvmlDeviceGetName
    serial: str | None = None  # nvmlDeviceGetSerial
    pci_bus_id: str | None = None  # nvmlDeviceGetPciInfo().busId, normalised "0000:9b:00.0"
    driver_version: str | None = None  # nvmlSystemGetDriverVersion
    utilization_gpu_percent: float | None = None  # nvmlDeviceGetUtilizationRates().gpu
    utilization_memory_percent: float | None = None  # nvmlDeviceGetUtilizationRates().memory
    memory_used_bytes: int | None = None  # nvmlDeviceGetMemoryInfo().used
    memory_total_bytes: int | None = None  # nvmlDeviceGetMemoryInfo().total
    temperature_celsius: float | None = None  # nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
    power_watts: float | None = None  # nvmlDeviceGetPowerUsage / 1000
    energy_joules: float | None = None  # nvmlDeviceGetTotalEnergyConsumption / 1000 (cumulative)
    sm_clock_mhz: int | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
    memory_clock_mhz: int | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)
    performance_state: int | None = None  # nvmlDeviceGetPerformanceState (0 = P0)
    clocks_event_reasons: int | None = None  # nvmlDeviceGetCurrentClocksEventReasons bitmask
    ecc_corrected_volatile: int | None = None  # GetTotalEccErrors(CORRECTED, VOLATILE)
    ecc_uncorrected_volatile: int | None = None  # GetTotalEccErrors(UNCORRECTED, VOLATILE)
    ecc_corrected_aggregate: int | None = None  # GetTotalEccErrors(CORRECTED, AGGREGATE)
    ecc_uncorrected_aggregate: int | None = None  # GetTotalEccErrors(UNCORRECTED, AGGREGATE)
    retired_pages_sbe: int | None = None  # len(GetRetiredPages(MULTIPLE_SINGLE_BIT_ECC)), pre-Ampere
    retired_pages_dbe: int | None = None  # len(GetRetiredPages(DOUBLE_BIT_ECC)), pre-Ampere
    retired_pages_pending: bool | None = None  # GetRetiredPagesPendingStatus
    remapped_rows_corrected: int | None = None  # GetRemappedRows()[0], Ampere and later
    remapped_rows_uncorrected: int | None = None  # GetRemappedRows()[1]
    remapped_rows_pending: bool | None = None  # GetRemappedRows()[2]
    remapped_rows_failure: bool | None = None  # GetRemappedRows()[3]
    pcie_replay_errors: int | None = None  # nvmlDeviceGetPcieReplayCounter (cumulative)
    # GPM's PCIE_TX/RX_PER_SEC every round where offered, else GetPcieThroughput(TX/RX) KB/s * 1024 (slow)
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_link_gen: int | None = None  # GetCurrPcieLinkGeneration
    pcie_link_gen_max: int | None = None  # GetMaxPcieLinkGeneration
    pcie_link_width: int | None = None  # GetCurrPcieLinkWidth
    pcie_link_width_max: int | None = None  # GetMaxPcieLinkWidth
    nvlink_links_active: int | None = None  # count of links with GetNvLinkState == ACTIVE
    nvlink_crc_flit_errors: int | None = None  # sum over links, GetNvLinkErrorCounter(CRC_FLIT)
    nvlink_crc_data_errors: int | None = None  # sum over links, GetNvLinkErrorCounter(CRC_DATA)
    nvlink_replay_errors: int | None = None  # sum over links, GetNvLinkErrorCounter(REPLAY)
    nvlink_recovery_errors: int | None = None  # sum over links, GetNvLinkErrorCounter(RECOVERY)
    # Schema version 5 (collectors/gpu_sampling.py: which field is read how often). Fields read on the slow
    # cadence (PCIe replay counter, current link generation and width, NVLink state and errors, PCIe
    # throughput where GPM lacks it, violation times) keep their last reading between reads; this is when it
    # was taken. energy_joules is current every round (integrated from power between counter reads).
    slow_read_ts: float | None = None
    violation_power_seconds: float | None = None  # GetViolationStatus(POWER).violationTime / 1e9 (cumulative)
    violation_thermal_seconds: float | None = None  # GetViolationStatus(THERMAL).violationTime / 1e9
    # GPM (Hopper and later), averaged over the round: nvmlGpmMetricsGet between this and the previous sample.
    gpm_sm_activity_percent: float | None = None  # NVML_GPM_METRIC_SM_UTIL
    gpm_sm_occupancy_percent: float | None = None  # NVML_GPM_METRIC_SM_OCCUPANCY
    gpm_tensor_activity_percent: float | None = None  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    gpm_dram_bandwidth_percent: float | None = None  # NVML_GPM_METRIC_DRAM_BW_UTIL
    nvlink_tx_bytes_per_second: float | None = None  # NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC MiB/s * 2**20
    nvlink_rx_bytes_per_second: float | None = None  # NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC MiB/s * 2**20


@dataclass(frozen=True, slots=True)
class NicSample:
    """State of one InfiniBand / RoCE port, from /sys/class/infiniband/<device>/ports/<port>/."""

    ts: float
    host: str
    device: str  # e.g. mlx5_0
    port: int
    state: str | None = None  # "ACTIVE", from "4: ACTIVE"
    phys_state: str | None = None  # "LinkUp", from "5: LinkUp"
    rate_gbps: float | None = None  # from "400 Gb/sec (4X NDR)"
    link_layer: str | None = None  # "InfiniBand" or "Ethernet"


@dataclass(frozen=True, slots=True)
class NicCounterSample:
    """One cumulative port counter, with the delta and rate since the previous reading of the same counter.

    `delta` and `rate_per_second` are None on the first reading and after a reset (the value went down):
    a reset is never a negative rate.
    """

    ts: float
    host: str
    device: str
    port: int
    counter: str  # file name, e.g. symbol_error, port_xmit_data
    group: str  # "counters" (IBTA) or "hw_counters" (driver)
    value: int
    delta: int | None = None
    rate_per_second: float | None = None
    reset: bool = False


class EventKind(StrEnum):
    """What an Event is about. Values are stored as text; the catalog in data/ gives their meaning."""

    XID = "xid"
    SXID = "sxid"
    GPU_FALLEN_OFF_BUS = "gpu_fallen_off_bus"
    GPU_LOST = "gpu_lost"  # NVML says GPU_IS_LOST / UNKNOWN for a device that answered before
    PCIE_AER = "pcie_aer"
    NIC_OVER_TEMPERATURE = "nic_over_temperature"
    NIC_INSUFFICIENT_POWER = "nic_insufficient_power"
    LINK_DOWN = "link_down"  # an IB/RoCE port left ACTIVE, or link_downed increased
    SEGFAULT_NCCL = "segfault_nccl"
    SEGFAULT_CUDA = "segfault_cuda"
    NCCL_ERROR = "nccl_error"
    COLLECTOR_ERROR = "collector_error"


@dataclass(frozen=True, slots=True)
class Event:
    """A fault or notable occurrence. `count` > 1 when repeats of the same event were folded into one row."""

    ts: float
    host: str
    kind: EventKind
    source: str  # "kmsg", "nvml", "rdma", "nccl_log", "simulated" ...
    message: str
    code: int | None = None  # XID / SXID number, NCCL status
    pci_bus_id: str | None = None
    gpu_index: int | None = None
    device: str | None = None  # NIC (mlx5_0), NVSwitch (nvidia-nvswitch3) or rank/file for NCCL
    pid: int | None = None
    process_name: str | None = None
    seq: int | None = None  # kernel log sequence number, when known
    count: int = 1
    last_ts: float | None = None  # time of the last repeat folded into this row


@dataclass(slots=True)
class Batch:
    """What one collection round yields. Collectors return one; the agent buffers and stores them."""

    gpu_samples: list[GpuSample] = field(default_factory=list)
    nic_samples: list[NicSample] = field(default_factory=list)
    nic_counters: list[NicCounterSample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def extend(self, other: Batch) -> None:
        self.gpu_samples.extend(other.gpu_samples)
        self.nic_samples.extend(other.nic_samples)
        self.nic_counters.extend(other.nic_counters)
        self.events.extend(other.events)

    def __len__(self) -> int:
        return len(self.gpu_samples) + len(self.nic_samples) + len(self.nic_counters) + len(self.events)
