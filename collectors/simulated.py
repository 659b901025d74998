"""A simulated GPU fleet and the collectors that read it, for demos, tests and benchmarks without hardware.

`SimulatedFleet` holds hosts of H100-like GPUs and 400 Gb/s InfiniBand ports that drift as a training job
runs, plus scripted faults. `SimulatedGpuCollector`, `SimulatedNicCollector` and `SimulatedKmsgCollector`
implement the same Collector protocol as the NVML, RDMA and kernel-log readers. Time comes only from the
`now` given to `collect`: the same seed and the same sequence of `now` values give the same records.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import uuid
from collections import deque
from collections.abc import Mapping, Sequence

from collectors.gpu_device import FastReading, GpmReading, GpuIdentity, GpuProcesses, SlowReading
from collectors.gpu_sampling import GpuSampler, SamplingPlan
from collectors.simulated_faults import (
    EccRampThenDbe,
    FaultScript,
    GpuFallOffBus,
    IbCounterReset,
    IbLinkFlap,
    IbSymbolErrors,
    NvlinkCrcBurst,
    ThermalThrottle,
    XidStorm,
    default_demo_faults,
)
from collectors.simulated_hardware import (
    COUNTER_INDEX,
    DRIVER_VERSION,
    GPU_NAME,
    LINK_LAYER,
    MAX_GPUS_PER_HOST,
    MEMORY_CLOCK_MHZ,
    MEMORY_TOTAL_BYTES,
    PCIE_GEN,
    PCIE_WIDTH,
    PORT_COUNTERS,
    PORT_RATE_GBPS,
    SimGpu,
    SimPort,
)
from collectors.simulated_kernel_log import xid_detail, xid_line
from fleetguard.records.telemetry import Batch, Event, EventKind, NicCounterSample, NicSample

__all__ = [
    "MAX_GPUS_PER_HOST",
    "MAX_HOSTS",
    "MAX_PORTS_PER_HOST",
    "EccRampThenDbe",
    "FaultScript",
    "GpuFallOffBus",
    "IbCounterReset",
    "IbLinkFlap",
    "IbSymbolErrors",
    "NvlinkCrcBurst",
    "SimulatedFleet",
    "SimulatedGpuCollector",
    "SimulatedKmsgCollector",
    "SimulatedNicCollector",
    "ThermalThrottle",
    "XidStorm",
    "default_demo_faults",
    "parse_fleet_spec",
]

MAX_HOSTS = 4096
MAX_PORTS_PER_HOST = 16
KERNEL_LOG_LINES = 16_384  # like the kernel's ring buffer, a reader that falls behind loses the oldest lines
SOURCE = "simulated"
TRAINING_PROCESS = "python"
_TEMPERATURE_TIME_CONSTANT_SECONDS = 30.0
_UUID_NAMESPACE = uuid.UUID("6f1e2a6c-54b4-4c1e-9a8e-3f7d2c1b0a99")
_LINK_DOWNED = COUNTER_INDEX["link_downed"]
_FLEET_SPEC = re.compile(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*")


def _check_size(hosts: int, gpus_per_host: int, ports_per_host: int = 0) -> None:
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"a simulated fleet has 1 to {MAX_HOSTS} hosts, not {hosts}")
    if not 1 <= gpus_per_host <= MAX_GPUS_PER_HOST:
        raise ValueError(f"a simulated host has 1 to {MAX_GPUS_PER_HOST} GPUs, not {gpus_per_host}")
    if not 0 <= ports_per_host <= MAX_PORTS_PER_HOST:
        raise ValueError(f"a simulated host has 0 to {MAX_PORTS_PER_HOST} NIC ports, not {ports_per_host}")


def parse_fleet_spec(spec: str) -> tuple[int, int]:
    """ "4x8" -> (4 hosts, 8 GPUs each). Raises ValueError saying what is wrong with any other text."""
    match = _FLEET_SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(f"fleet spec {spec!r} is not HOSTSxGPUS, e.g. 4x8")
    hosts_text, gpus_text = match.groups()
    if len(hosts_text) > 6 or len(gpus_text) > 6:  # before int(): a thousand-digit number is just too big
        raise ValueError(f"fleet spec {spec!r} is too large: at most {MAX_HOSTS}x{MAX_GPUS_PER_HOST}")
    hosts, gpus = int(hosts_text), int(gpus_text)
    _check_size(hosts, gpus)
    return hosts, gpus


class SimHost:
    """One simulated host: its GPUs, its NIC ports and its kernel log sequence."""

    __slots__ = ("gpus", "index", "inlet_offset_celsius", "kernel_seq", "name", "ports")

    def __init__(
        self, index: int, gpus: list[SimGpu], ports: list[SimPort], rng: random.Random, name: str = ""
    ) -> None:
        self.index = index
        self.name = name or f"sim-host-{index:03d}"
        self.gpus = gpus
        self.ports = ports
        self.inlet_offset_celsius = rng.uniform(0.0, 3.0)  # some racks breathe warmer air
        self.kernel_seq = rng.randint(2000, 9000)  # lines the kernel printed since boot


class SimulatedFleet:
    """Hosts of simulated GPUs and ports, moved forward in time by `advance_to(now)`, with scripted faults.

    Fault times are seconds after `start_ts` (the first `now` seen when None). Several collectors share one
    fleet: the first to call `advance_to` with a new `now` moves it, the others read the same state.
    """

    def __init__(
        self,
        hosts: int,
        gpus_per_host: int,
        ports_per_host: int = 8,
        seed: int = 0,
        faults: Sequence[FaultScript] | None = None,
        start_ts: float | None = None,
        host_names: Sequence[str] = (),
    ) -> None:
        """`host_names` names the hosts (default sim-host-000, ...): one simulated host per agent, each
        shipping as its own agent.host to a controller."""
        _check_size(hosts, gpus_per_host, ports_per_host)
        if host_names and len(host_names) != hosts:
            raise ValueError(f"{len(host_names)} host names for {hosts} hosts")
        self._host_names = tuple(host_names)
        if start_ts is not None and not math.isfinite(start_ts):
            raise ValueError(f"start_ts must be a finite epoch time, not {start_ts}")
        self.host_count = hosts
        self.gpus_per_host = gpus_per_host
        self.ports_per_host = ports_per_host
        self.seed = seed
        self.start_ts = start_ts
        self.faults: tuple[FaultScript, ...] = tuple(faults or ())
        for fault in self.faults:
            fault.check(self)
        self._rng = random.Random(seed)
        self.hosts: tuple[SimHost, ...] = tuple(self._build_host(i) for i in range(hosts))
        self._elapsed_seconds: float | None = None  # since start_ts, at the last advance
        self._now = 0.0
        self._kernel_log: deque[Event] = deque(maxlen=KERNEL_LOG_LINES)
        self._kernel_log_end = 0  # position one past the newest line ever logged

    def _build_host(self, index: int) -> SimHost:
        rng = self._rng
        name = self._host_names[index] if self._host_names else f"sim-host-{index:03d}"
        pid_base = rng.randint(100_000, 4_000_000)
        gpus = []
        for g in range(self.gpus_per_host):
            gpu_uuid = uuid.uuid5(_UUID_NAMESPACE, f"{self.seed}/{name}/{g}")
            serial = f"1654922{gpu_uuid.int % 1_000_000:06d}"
            gpus.append(SimGpu(g, f"GPU-{gpu_uuid}", serial, pid_base + g, rng))
        ports = [SimPort(f"mlx5_{p}", 1, rng) for p in range(self.ports_per_host)]
        return SimHost(index, gpus, ports, rng, name)

    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]

    # ---- time ---------------------------------------------------------------------------------------------

    def advance_to(self, now: float) -> float:
        """Move the simulation to `now` (epoch seconds); returns the seconds simulated (0: not new)."""
        if self.start_ts is None:
            self.start_ts = now
        elapsed = now - self.start_ts
        if self._elapsed_seconds is None:
            since, dt = -math.inf, max(0.0, elapsed)
        elif elapsed > self._elapsed_seconds:
            since, dt = self._elapsed_seconds, elapsed - self._elapsed_seconds
        else:
            return 0.0
        self._now = now
        for fault in self.faults:
            fault.apply(self, since, elapsed)
        rng = self._rng
        settle = 1.0 - math.exp(-dt / _TEMPERATURE_TIME_CONSTANT_SECONDS)
        for host in self.hosts:
            inlet = host.inlet_offset_celsius
            for gpu in host.gpus:
                if not gpu.lost:
                    gpu.step(dt, settle, inlet, rng)
            for port in host.ports:
                port.step(dt, rng)
        self._elapsed_seconds = elapsed
        return dt

    # ---- what fault scripts touch (collectors.simulated_faults.FaultTarget) -----------------------------

    def gpu(self, host: int, gpu: int) -> SimGpu:
        return self.hosts[host].gpus[gpu]

    def port(self, host: int, port: int) -> SimPort:
        return self.hosts[host].ports[port]

    def kernel_xid(self, host: int, gpu: SimGpu, xid: int, *, owned: bool = True) -> None:
        pid, process = (gpu.pid, TRAINING_PROCESS) if owned else (None, None)
        message = xid_line(gpu.pci_bus_id, xid, pid, process, xid_detail(xid, self._rng))
        self._log(host, EventKind.XID, message, gpu, code=xid, pid=pid, process_name=process)

    def kernel_line(self, host: int, kind: EventKind, message: str, gpu: SimGpu | None = None) -> None:
        self._log(host, kind, message, gpu)

    def _log(
        self,
        host_index: int,
        kind: EventKind,
        message: str,
        gpu: SimGpu | None,
        code: int | None = None,
        pid: int | None = None,
        process_name: str | None = None,
    ) -> None:
        host = self.hosts[host_index]
        host.kernel_seq += 1
        event = Event(
            ts=self._now,
            host=host.name,
            kind=kind,
            source=SOURCE,
            message=message,
            code=code,
            pci_bus_id=gpu.pci_bus_id if gpu is not None else None,
            gpu_index=gpu.index if gpu is not None else None,
            pid=pid,
            process_name=process_name,
            seq=host.kernel_seq,
        )
        self._kernel_log.append(event)
        self._kernel_log_end += 1

    def kernel_log_since(self, position: int) -> tuple[list[Event], int, int]:
        """Lines logged at or after `position`: (lines, lines lost to the ring buffer, next position)."""
        oldest = self._kernel_log_end - len(self._kernel_log)
        lost = max(0, oldest - position)
        start = max(position, oldest) - oldest
        lines = list(itertools.islice(self._kernel_log, start, None))
        return lines, lost, self._kernel_log_end


class _SimulatedCollector:
    """What the three collectors share: the fleet, problem counts and a guard on the `now` they are given."""

    name = "simulated"

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self._problems: dict[str, int] = {}
        self._last_now: float | None = None

    def _advance(self, now: float) -> bool:
        """Move the fleet to `now`; False (and counted) when `now` cannot be used."""
        if not math.isfinite(now):
            self._count("invalid_time")
            return False
        if self._last_now is not None and now < self._last_now:
            self._count("clock_went_backwards")
        self._last_now = now
        self.fleet.advance_to(now)
        return True

    def _count(self, reason: str, n: int = 1) -> None:
        self._problems[reason] = self._problems.get(reason, 0) + n

    def problems(self) -> Mapping[str, int]:
        return dict(self._problems)

    def close(self) -> None:
        pass  # nothing to release; the fleet outlives its collectors


class SimulatedGpuDevice:
    """A simulated GPU as a `collectors.gpu_device.GpuDevice`: what NVML would answer, GPM included."""

    __slots__ = ("_gpu", "_identity")

    def __init__(self, gpu: SimGpu) -> None:
        self._gpu = gpu
        self._identity = GpuIdentity(
            index=gpu.index,
            uuid=gpu.uuid,
            name=GPU_NAME,
            serial=gpu.serial,
            pci_bus_id=gpu.pci_bus_id,
            driver_version=DRIVER_VERSION,
            pcie_link_gen_max=PCIE_GEN,
            pcie_link_width_max=PCIE_WIDTH,
        )

    @property
    def identity(self) -> GpuIdentity:
        return self._identity

    @property
    def has_gpm(self) -> bool:
        return True  # an H100

    def read_fast(self) -> FastReading:
        gpu = self._gpu
        return FastReading(
            utilization_gpu_percent=gpu.utilization_gpu_percent,
            utilization_memory_percent=gpu.utilization_memory_percent,
            memory_used_bytes=gpu.memory_used_bytes,
            memory_total_bytes=MEMORY_TOTAL_BYTES,
            temperature_celsius=float(round(gpu.temperature_celsius)),  # NVML reports whole degrees
            power_watts=gpu.power_watts,
            sm_clock_mhz=gpu.sm_clock_mhz,
            memory_clock_mhz=MEMORY_CLOCK_MHZ,
            performance_state=0,
            clocks_event_reasons=gpu.clocks_event_reasons,
            ecc_corrected_volatile=gpu.ecc_corrected_volatile,
            ecc_uncorrected_volatile=gpu.ecc_uncorrected_volatile,
            ecc_corrected_aggregate=gpu.ecc_corrected_aggregate,
            ecc_uncorrected_aggregate=gpu.ecc_uncorrected_aggregate,
            remapped_rows_corrected=gpu.remapped_rows_corrected,
            remapped_rows_uncorrected=gpu.remapped_rows_uncorrected,
            remapped_rows_pending=gpu.remapped_rows_pending,
            remapped_rows_failure=gpu.remapped_rows_failure,
        )  # retired_pages_* stay None: Hopper remaps rows instead of retiring pages

    def read_slow(self, *, pcie_throughput: bool) -> SlowReading:
        gpu = self._gpu
        return SlowReading(
            pcie_replay_errors=gpu.pcie_replay_errors,
            pcie_link_gen=PCIE_GEN,
            pcie_link_width=PCIE_WIDTH,
            pcie_tx_bytes_per_second=gpu.pcie_tx_bytes_per_second if pcie_throughput else None,
            pcie_rx_bytes_per_second=gpu.pcie_rx_bytes_per_second if pcie_throughput else None,
            violation_power_seconds=round(gpu.violation_power_seconds, 3),
            violation_thermal_seconds=round(gpu.violation_thermal_seconds, 3),
            nvlink_links_active=gpu.nvlink_links_active,
            nvlink_crc_flit_errors=gpu.nvlink_crc_flit_errors,
            nvlink_crc_data_errors=gpu.nvlink_crc_data_errors,
            nvlink_replay_errors=gpu.nvlink_replay_errors,
            nvlink_recovery_errors=gpu.nvlink_recovery_errors,
        )

    def read_energy_joules(self) -> float | None:
        return self._gpu.energy_joules

    def read_gpm(self) -> GpmReading | None:
        gpu = self._gpu
        return GpmReading(
            sm_activity_percent=gpu.gpm_sm_activity_percent,
            sm_occupancy_percent=gpu.gpm_sm_occupancy_percent,
            tensor_activity_percent=gpu.gpm_tensor_activity_percent,
            dram_bandwidth_percent=gpu.gpm_dram_bandwidth_percent,
            pcie_tx_bytes_per_second=gpu.pcie_tx_bytes_per_second,
            pcie_rx_bytes_per_second=gpu.pcie_rx_bytes_per_second,
            nvlink_tx_bytes_per_second=gpu.nvlink_bytes_per_second,
            nvlink_rx_bytes_per_second=gpu.nvlink_bytes_per_second,
        )

    def compute_pids(self) -> tuple[int, ...] | None:
        return (self._gpu.pid,)  # the training rank that owns the GPU


class SimulatedGpuCollector(_SimulatedCollector):
    """What the NVML collector would read from every GPU of the fleet, on the same cadence
    (`collectors.gpu_sampling`); a GPU that fell off reports as lost."""

    name = "simulated_gpu"

    def __init__(self, fleet: SimulatedFleet, plan: SamplingPlan | None = None) -> None:
        super().__init__(fleet)
        self._reported_lost: set[tuple[int, int]] = set()
        plan = plan or SamplingPlan()
        per_host = fleet.gpus_per_host
        self._devices = [
            [(SimulatedGpuDevice(gpu), GpuSampler(plan, gpu.index / per_host)) for gpu in host.gpus]
            for host in fleet.hosts
        ]
        self._pids: list[GpuProcesses] = []

    def collect(self, now: float) -> Batch:
        batch = Batch()
        if not self._advance(now):
            return batch
        samples = batch.gpu_samples
        self._pids = []
        for host in self.fleet.hosts:
            for gpu, (device, sampler) in zip(host.gpus, self._devices[host.index], strict=True):
                if not gpu.lost:
                    samples.append(sampler.sample(device, host.name, now))
                    self._pids.append(GpuProcesses(gpu.uuid, gpu.index, gpu.pci_bus_id, (gpu.pid,)))
                elif (host.index, gpu.index) not in self._reported_lost:
                    self._reported_lost.add((host.index, gpu.index))
                    batch.events.append(_gpu_lost_event(now, host.name, gpu))
        return batch

    def gpu_processes(self) -> list[GpuProcesses]:
        """The training process on each GPU still answering at the last round (every host of the fleet)."""
        return list(self._pids)


def _gpu_lost_event(now: float, host: str, gpu: SimGpu) -> Event:
    return Event(
        ts=now,
        host=host,
        kind=EventKind.GPU_LOST,
        source=SOURCE,
        message=f"GPU {gpu.index} ({gpu.pci_bus_id}, {gpu.uuid}): NVML: GPU is lost",
        pci_bus_id=gpu.pci_bus_id,
        gpu_index=gpu.index,
    )


class SimulatedNicCollector(_SimulatedCollector):
    """What the RDMA sysfs reader would see: port state, and every counter with its delta and rate.

    Like the real reader it keeps the previous reading per port: a counter that went down is a reset
    (delta and rate None), and a port leaving ACTIVE or a rise of link_downed is a LINK_DOWN event.
    """

    name = "simulated_nic"

    def __init__(self, fleet: SimulatedFleet) -> None:
        super().__init__(fleet)
        self._previous: dict[tuple[int, int], tuple[float, list[int], str]] = {}

    def collect(self, now: float) -> Batch:
        batch = Batch()
        if not self._advance(now):
            return batch
        for host in self.fleet.hosts:
            for index, port in enumerate(host.ports):
                self._read_port(batch, now, host, index, port)
        return batch

    def _read_port(self, batch: Batch, now: float, host: SimHost, index: int, port: SimPort) -> None:
        name, device, number = host.name, port.device, port.port
        batch.nic_samples.append(
            NicSample(now, name, device, number, port.state, port.phys_state, PORT_RATE_GBPS, LINK_LAYER)
        )
        values = list(port.counters)
        previous = self._previous.get((host.index, index))
        self._previous[(host.index, index)] = (now, values, port.state)
        counters = batch.nic_counters
        if previous is None:
            for (counter, group), value in zip(PORT_COUNTERS, values, strict=True):
                counters.append(NicCounterSample(now, name, device, number, counter, group, value))
            return
        before_ts, before, before_state = previous
        dt = now - before_ts
        for (counter, group), value, old in zip(PORT_COUNTERS, values, before, strict=True):
            if value < old:
                counters.append(
                    NicCounterSample(now, name, device, number, counter, group, value, reset=True)
                )
                continue
            delta = value - old
            rate = delta / dt if dt > 0 else None
            counters.append(NicCounterSample(now, name, device, number, counter, group, value, delta, rate))
        downed = values[_LINK_DOWNED] - before[_LINK_DOWNED]
        if before_state == "ACTIVE" and port.state != "ACTIVE":
            message = f"{device} port {number}: state ACTIVE -> {port.state} (phys_state {port.phys_state})"
        elif downed > 0:
            message = (
                f"{device} port {number}: link_downed +{downed}, link went down and recovered between reads"
            )
        else:
            return
        batch.events.append(
            Event(
                ts=now,
                host=name,
                kind=EventKind.LINK_DOWN,
                source=SOURCE,
                message=message,
                device=device,
            )
        )


class SimulatedKmsgCollector(_SimulatedCollector):
    """Kernel log lines the fleet's faults printed since the last call (XID, fallen off the bus ...)."""

    name = "simulated_kmsg"

    def __init__(self, fleet: SimulatedFleet) -> None:
        super().__init__(fleet)
        self._position = 0

    def collect(self, now: float) -> Batch:
        batch = Batch()
        if not self._advance(now):
            return batch
        lines, lost, self._position = self.fleet.kernel_log_since(self._position)
        if lost:
            self._count("kernel_log_lines_lost", lost)
        batch.events.extend(lines)
        return batch
