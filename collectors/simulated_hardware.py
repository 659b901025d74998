"""State of simulated H100 GPUs and 400 Gb/s InfiniBand ports, and how it drifts while a job trains.

Faults (collectors/simulated_faults.py) change this state; the simulated collectors read it. Stdlib only and
cheap per round: a handful of `random.Random` draws per device, no numpy.
"""

from __future__ import annotations

import random

GPU_NAME = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "550.90.07"
MEMORY_TOTAL_BYTES = 81_559 * 1024 * 1024  # what NVML reports for an H100 80GB HBM3
SM_CLOCK_MAX_MHZ = 1980
MEMORY_CLOCK_MHZ = 2619
NVLINK_LINKS = 18
PCIE_GEN = 5
PCIE_WIDTH = 16
POWER_LIMIT_WATTS = 700.0

# Bits of nvmlDeviceGetCurrentClocksEventReasons, as pynvml.nvmlClocksEventReason* (a test checks them).
CLOCKS_EVENT_SW_POWER_CAP = 0x4
CLOCKS_EVENT_HW_SLOWDOWN = 0x8
CLOCKS_EVENT_SW_THERMAL_SLOWDOWN = 0x20
CLOCKS_EVENT_HW_THERMAL_SLOWDOWN = 0x40

# H100 SXM thresholds as nvidia-smi -q prints them ("GPU Max Operating Temp", "GPU Slowdown Temp").
MAX_OPERATING_CELSIUS = 87.0
SLOWDOWN_CELSIUS = 89.0

PORT_RATE_GBPS = 400.0
LINK_LAYER = "InfiniBand"
# port_xmit_data / port_rcv_data count octets divided by 4: a 400 Gb/s port at line rate moves 12.5e9 units/s.
_LINE_RATE_DATA_UNITS_PER_SECOND = PORT_RATE_GBPS * 1e9 / 8 / 4
_DATA_UNITS_PER_PACKET = 1024  # 4 KiB MTU

# (file name, sysfs group) of every port counter the simulated NIC exposes, in a fixed order.
PORT_COUNTERS: tuple[tuple[str, str], ...] = (
    ("port_xmit_data", "counters"),
    ("port_rcv_data", "counters"),
    ("port_xmit_packets", "counters"),
    ("port_rcv_packets", "counters"),
    ("port_xmit_wait", "counters"),
    ("port_xmit_discards", "counters"),
    ("symbol_error", "counters"),
    ("link_downed", "counters"),
    ("link_error_recovery", "counters"),
    ("local_link_integrity_errors", "counters"),
    ("excessive_buffer_overrun_errors", "counters"),
    ("port_rcv_errors", "counters"),
    ("port_rcv_remote_physical_errors", "counters"),
    ("out_of_sequence", "hw_counters"),
    ("packet_seq_err", "hw_counters"),
    ("local_ack_timeout_err", "hw_counters"),
    ("rnr_nak_retry_err", "hw_counters"),
    ("req_transport_retries_exceeded", "hw_counters"),
    ("out_of_buffer", "hw_counters"),
    ("duplicate_request", "hw_counters"),
    ("implied_nak_seq_err", "hw_counters"),
)
COUNTER_INDEX: dict[str, int] = {name: i for i, (name, _group) in enumerate(PORT_COUNTERS)}
_XMIT_DATA = COUNTER_INDEX["port_xmit_data"]
_RCV_DATA = COUNTER_INDEX["port_rcv_data"]
_XMIT_PACKETS = COUNTER_INDEX["port_xmit_packets"]
_RCV_PACKETS = COUNTER_INDEX["port_rcv_packets"]
_XMIT_WAIT = COUNTER_INDEX["port_xmit_wait"]
_SYMBOL_ERROR = COUNTER_INDEX["symbol_error"]
_OUT_OF_SEQUENCE = COUNTER_INDEX["out_of_sequence"]

# HGX H100 baseboard bus numbers (nvidia-smi order); the second row serves 16-GPU hosts.
_GPU_PCI_BUSES = (
    0x18,
    0x2A,
    0x3A,
    0x5D,
    0x9A,
    0xAB,
    0xBA,
    0xDB,
    0x1B,
    0x2D,
    0x3D,
    0x60,
    0x9D,
    0xAE,
    0xBD,
    0xDE,
)
MAX_GPUS_PER_HOST = len(_GPU_PCI_BUSES)


def gpu_pci_bus_id(index: int) -> str:
    """Normalised bus id ("0000:18:00.0") of the GPU at `index` on a simulated host."""
    return f"0000:{_GPU_PCI_BUSES[index]:02x}:00.0"


def expected_count(expected: float, draw: float) -> int:
    """An integer count with mean `expected`, from one uniform draw (cheap stand-in for a Poisson draw)."""
    whole = int(expected)
    return whole + (1 if draw < expected - whole else 0)


class SimGpu:
    """One simulated GPU: identity, its training load and every cumulative counter NVML would report."""

    __slots__ = (
        "clocks_event_reasons",
        "ecc_corrected_aggregate",
        "ecc_corrected_volatile",
        "ecc_uncorrected_aggregate",
        "ecc_uncorrected_volatile",
        "energy_joules",
        "index",
        "load",
        "lost",
        "memory_base_bytes",
        "memory_used_bytes",
        "nvlink_crc_data_errors",
        "nvlink_crc_flit_errors",
        "nvlink_crc_rate_per_second",
        "nvlink_links_active",
        "nvlink_recovery_errors",
        "nvlink_replay_errors",
        "pci_bus_id",
        "pcie_replay_errors",
        "pcie_replay_rate_per_second",
        "pcie_rx_bytes_per_second",
        "pcie_tx_bytes_per_second",
        "pid",
        "power_peak_watts",
        "power_watts",
        "remapped_rows_corrected",
        "remapped_rows_failure",
        "remapped_rows_pending",
        "remapped_rows_uncorrected",
        "sbe_rate_per_second",
        "serial",
        "sm_clock_mhz",
        "temperature_celsius",
        "temperature_floor_celsius",
        "temperature_offset_celsius",
        "utilization_gpu_percent",
        "utilization_memory_percent",
        "uuid",
        "violation_power_seconds",
        "violation_thermal_seconds",
    )

    def __init__(self, index: int, uuid: str, serial: str, pid: int, rng: random.Random) -> None:
        self.index = index
        self.uuid = uuid
        self.serial = serial
        self.pci_bus_id = gpu_pci_bus_id(index)
        self.pid = pid  # the training rank that owns this GPU, named in XID lines
        self.lost = False
        # Per-GPU character: some run hotter or draw more power; a few carry a slow trickle of errors.
        self.power_peak_watts = rng.uniform(660.0, 720.0)
        self.temperature_offset_celsius = rng.uniform(-2.0, 3.0)
        self.sbe_rate_per_second = rng.uniform(1e-6, 2e-5) if rng.random() < 0.1 else 0.0
        self.nvlink_crc_rate_per_second = rng.uniform(1e-5, 1e-3) if rng.random() < 0.15 else 0.0
        self.pcie_replay_rate_per_second = rng.uniform(1e-5, 1e-4) if rng.random() < 0.1 else 0.0
        self.memory_base_bytes = int(rng.uniform(68e9, 74e9))
        self.load = rng.uniform(0.88, 0.97)
        self.energy_joules = rng.uniform(1e8, 5e9)  # counts since the driver loaded, days ago
        self.ecc_corrected_volatile = 0
        self.ecc_uncorrected_volatile = 0
        self.ecc_corrected_aggregate = rng.randint(1, 20) if rng.random() < 0.2 else 0
        self.ecc_uncorrected_aggregate = 0
        self.remapped_rows_corrected = rng.randint(1, 2) if rng.random() < 0.05 else 0
        self.remapped_rows_uncorrected = 0
        self.remapped_rows_pending = False
        self.remapped_rows_failure = False
        self.pcie_replay_errors = rng.randint(0, 3)
        self.nvlink_links_active = NVLINK_LINKS
        self.nvlink_crc_flit_errors = rng.randint(0, 5)
        self.nvlink_crc_data_errors = 0
        self.nvlink_replay_errors = 0
        self.nvlink_recovery_errors = 0
        self.temperature_floor_celsius = 0.0  # set by a cooling fault for the current step
        self.power_watts = 0.0
        self.temperature_celsius = 0.0
        self.utilization_gpu_percent = 0.0
        self.utilization_memory_percent = 0.0
        self.memory_used_bytes = self.memory_base_bytes
        self.sm_clock_mhz = SM_CLOCK_MAX_MHZ
        self.clocks_event_reasons = 0
        self.pcie_tx_bytes_per_second = 0.0
        self.pcie_rx_bytes_per_second = 0.0
        self.violation_power_seconds = 0.0  # time held down by the power cap / by heat, since driver load
        self.violation_thermal_seconds = 0.0
        self.step(0.0, 1.0, 0.0, rng)
        self.temperature_celsius = self._natural_temperature(0.0)

    def _natural_temperature(self, inlet_offset_celsius: float) -> float:
        # Air/liquid-cooled H100s sit near 55 C at 500 W and 75 C at 700 W.
        return (
            52.0 + (self.power_watts - 480.0) * 0.09 + self.temperature_offset_celsius + inlet_offset_celsius
        )

    def step(self, dt_seconds: float, settle: float, inlet_offset_celsius: float, rng: random.Random) -> None:
        """Advance by `dt_seconds`; `settle` (0..1): how far temperature and load near their targets."""
        load = self.load + (0.93 - self.load) * settle * 0.3 + (rng.random() - 0.5) * 0.06
        load = 0.85 if load < 0.85 else 1.0 if load > 1.0 else load
        self.load = load
        busy = (load - 0.85) / 0.15  # 0..1 within the training range
        demand = self.power_peak_watts * (0.76 + 0.24 * busy) + (rng.random() - 0.5) * 16.0

        natural = self._natural_temperature(inlet_offset_celsius)
        temperature = self.temperature_celsius + (natural - self.temperature_celsius) * settle
        if temperature < self.temperature_floor_celsius:
            temperature = self.temperature_floor_celsius
        self.temperature_floor_celsius = 0.0
        self.temperature_celsius = temperature
        temperature = float(round(temperature))  # NVML reports, and the firmware compares, whole degrees

        reasons = 0
        sm_clock = SM_CLOCK_MAX_MHZ
        if demand > POWER_LIMIT_WATTS:
            reasons |= CLOCKS_EVENT_SW_POWER_CAP
            sm_clock -= int((demand - POWER_LIMIT_WATTS) * 3.0)
        if temperature >= MAX_OPERATING_CELSIUS:
            reasons |= CLOCKS_EVENT_SW_THERMAL_SLOWDOWN
            sm_clock = min(
                sm_clock, SM_CLOCK_MAX_MHZ - int(120.0 * (temperature - MAX_OPERATING_CELSIUS + 1.0))
            )
        if temperature >= SLOWDOWN_CELSIUS:
            # HW slowdown cuts the clocks by a factor of two or more (NVML docs).
            reasons |= CLOCKS_EVENT_HW_SLOWDOWN | CLOCKS_EVENT_HW_THERMAL_SLOWDOWN
            sm_clock = min(sm_clock, SM_CLOCK_MAX_MHZ // 2 - int(15.0 * (temperature - SLOWDOWN_CELSIUS)))
        self.sm_clock_mhz = sm_clock
        self.clocks_event_reasons = reasons
        if reasons & CLOCKS_EVENT_SW_POWER_CAP:
            self.violation_power_seconds += dt_seconds
        if reasons & (CLOCKS_EVENT_SW_THERMAL_SLOWDOWN | CLOCKS_EVENT_HW_THERMAL_SLOWDOWN):
            self.violation_thermal_seconds += dt_seconds
        power = min(demand, POWER_LIMIT_WATTS) * (0.35 + 0.65 * sm_clock / SM_CLOCK_MAX_MHZ)
        self.power_watts = round(power, 3)
        self.energy_joules += power * dt_seconds

        draw = rng.random()
        self.utilization_gpu_percent = float(int(load * 100.0))
        self.utilization_memory_percent = float(int(25.0 + 35.0 * busy + 10.0 * draw))
        self.memory_used_bytes = self.memory_base_bytes + int(draw * 256 * 1024 * 1024)
        self.pcie_tx_bytes_per_second = round((3.0 + 9.0 * draw) * 1e9 * load, 0)
        self.pcie_rx_bytes_per_second = round(self.pcie_tx_bytes_per_second * 0.8, 0)

        # Healthy GPUs mostly count nothing; the few with a trickle draw only for themselves.
        if self.sbe_rate_per_second:
            n = expected_count(self.sbe_rate_per_second * dt_seconds, rng.random())
            self.ecc_corrected_volatile += n
            self.ecc_corrected_aggregate += n
        if self.nvlink_crc_rate_per_second:
            self.nvlink_crc_flit_errors += expected_count(
                self.nvlink_crc_rate_per_second * dt_seconds, rng.random()
            )
        if self.pcie_replay_rate_per_second:
            self.pcie_replay_errors += expected_count(
                self.pcie_replay_rate_per_second * dt_seconds, rng.random()
            )

    # ---- GPM profiling metrics, from the state above (no random draws: the fleet draws what it always did)

    @property
    def gpm_sm_activity_percent(self) -> float:
        """Busy SMs: a bf16 training step keeps ~95% of them busy while the GPU is busy at all."""
        return round(self.utilization_gpu_percent * 0.95, 2)

    @property
    def gpm_sm_occupancy_percent(self) -> float:
        """Resident warps of the maximum: large GEMM kernels run about half occupied."""
        return round(self.utilization_gpu_percent * 0.5, 2)

    @property
    def gpm_tensor_activity_percent(self) -> float:
        """Tensor-core activity falls with the SM clock when the GPU is throttled."""
        return round(self.utilization_gpu_percent * 0.7 * self.sm_clock_mhz / SM_CLOCK_MAX_MHZ, 2)

    @property
    def gpm_dram_bandwidth_percent(self) -> float:
        return round(min(100.0, self.utilization_memory_percent * 0.9), 2)

    @property
    def nvlink_bytes_per_second(self) -> float:
        """All-reduce traffic: up to ~180 GB/s each way over 18 links at full load."""
        return round(self.load * 180e9 * self.nvlink_links_active / NVLINK_LINKS, 0)

    def add_ecc(self, corrected: int = 0, uncorrected: int = 0) -> None:
        self.ecc_corrected_volatile += corrected
        self.ecc_corrected_aggregate += corrected
        self.ecc_uncorrected_volatile += uncorrected
        self.ecc_uncorrected_aggregate += uncorrected


class SimPort:
    """One simulated InfiniBand port: link state and the cumulative counters/ and hw_counters/."""

    __slots__ = ("counters", "device", "load", "phys_state", "port", "state", "symbol_error_rate_per_second")

    def __init__(self, device: str, port: int, rng: random.Random) -> None:
        self.device = device
        self.port = port
        self.state = "ACTIVE"
        self.phys_state = "LinkUp"
        self.load = rng.uniform(0.35, 0.75)  # share of line rate the job's collectives use
        self.symbol_error_rate_per_second = rng.uniform(1e-5, 1e-4) if rng.random() < 0.1 else 0.0
        counters = [0] * len(PORT_COUNTERS)
        uptime_seconds = rng.uniform(1e5, 1e6)
        counters[_XMIT_DATA] = int(uptime_seconds * self.load * _LINE_RATE_DATA_UNITS_PER_SECOND)
        counters[_RCV_DATA] = int(counters[_XMIT_DATA] * rng.uniform(0.97, 1.03))
        counters[_XMIT_PACKETS] = counters[_XMIT_DATA] // _DATA_UNITS_PER_PACKET
        counters[_RCV_PACKETS] = counters[_RCV_DATA] // _DATA_UNITS_PER_PACKET
        counters[_XMIT_WAIT] = int(uptime_seconds * rng.uniform(1e4, 1e5))
        counters[_SYMBOL_ERROR] = rng.randint(0, 3)
        self.counters = counters

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    def add(self, counter: str, n: int) -> None:
        self.counters[COUNTER_INDEX[counter]] += n

    def reset_counters(self) -> None:
        """What a driver reload does: every counter starts again from zero."""
        self.counters = [0] * len(PORT_COUNTERS)

    def step(self, dt_seconds: float, rng: random.Random) -> None:
        if self.state != "ACTIVE":
            return  # no traffic while the link is down
        load = self.load + (0.55 - self.load) * 0.05 + (rng.random() - 0.5) * 0.04
        load = 0.2 if load < 0.2 else 0.95 if load > 0.95 else load
        self.load = load
        units = load * _LINE_RATE_DATA_UNITS_PER_SECOND * dt_seconds
        counters = self.counters
        draw = rng.random()
        xmit = int(units * (0.97 + 0.06 * draw))
        rcv = int(units * (1.03 - 0.06 * draw))
        counters[_XMIT_DATA] += xmit
        counters[_RCV_DATA] += rcv
        counters[_XMIT_PACKETS] += xmit // _DATA_UNITS_PER_PACKET
        counters[_RCV_PACKETS] += rcv // _DATA_UNITS_PER_PACKET
        # Congestion: all-reduce traffic makes ports wait a little all the time.
        counters[_XMIT_WAIT] += int(load * 4e4 * dt_seconds * (0.5 + draw))
        if self.symbol_error_rate_per_second:
            counters[_SYMBOL_ERROR] += expected_count(
                self.symbol_error_rate_per_second * dt_seconds, rng.random()
            )
        if draw < 1e-4 * dt_seconds:
            counters[_OUT_OF_SEQUENCE] += 1
