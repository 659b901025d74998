"""Scripted faults for the simulated fleet: what goes wrong, on which GPU or port, when, and how it shows.

Each script is a frozen dataclass. Its `apply(target, t0, t1)` moves the hardware state over the interval
(t0, t1] of seconds since the fleet started: counters follow a cumulative curve of time and events fire when
their moment is crossed, so the result does not depend on how often the fleet is sampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from collectors.simulated_hardware import SimGpu, SimPort
from collectors.simulated_kernel_log import XID_DETAILS, fallen_off_bus_line
from fleetguard.records.telemetry import EventKind


class FleetShape(Protocol):
    """How big the fleet is, which is all a script needs to check its target exists."""

    @property
    def host_count(self) -> int: ...

    @property
    def gpus_per_host(self) -> int: ...

    @property
    def ports_per_host(self) -> int: ...


class FaultTarget(Protocol):
    """What a script may touch: the fleet's devices and its kernel log."""

    def gpu(self, host: int, gpu: int) -> SimGpu: ...

    def port(self, host: int, port: int) -> SimPort: ...

    def kernel_xid(self, host: int, gpu: SimGpu, xid: int, *, owned: bool = True) -> None:
        """Log `NVRM: Xid ...` for `gpu`; `owned` names the training process, else pid/name are unknown."""

    def kernel_line(self, host: int, kind: EventKind, message: str, gpu: SimGpu | None = None) -> None: ...


class FaultScript(Protocol):
    @property
    def host(self) -> int: ...

    @property
    def start_seconds(self) -> float: ...

    def check(self, fleet: FleetShape) -> None:
        """Raise ValueError when the target device does not exist in `fleet`."""

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        """Change the target's state for the interval (t0, t1] (seconds since the fleet started)."""


def _progress(t: float, start: float, duration: float) -> float:
    """0 before `start`, 1 after `start + duration`, linear in between."""
    if t < start:
        return 0.0
    if duration <= 0 or t >= start + duration:
        return 1.0
    return (t - start) / duration


def _crossed(t0: float, t1: float, moment: float) -> bool:
    return t0 < moment <= t1


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(what)


@dataclass(frozen=True, kw_only=True)
class _GpuFault:
    host: int
    gpu: int
    start_seconds: float

    def __post_init__(self) -> None:
        _require(math.isfinite(self.start_seconds) and self.start_seconds >= 0, "start_seconds must be >= 0")

    def check(self, fleet: FleetShape) -> None:
        _require(0 <= self.host < fleet.host_count, f"{self}: host {self.host} is not in the fleet")
        _require(0 <= self.gpu < fleet.gpus_per_host, f"{self}: gpu {self.gpu} is not on the host")


@dataclass(frozen=True, kw_only=True)
class _PortFault:
    host: int
    port: int  # index of the NIC on the host: 0 is mlx5_0
    start_seconds: float

    def __post_init__(self) -> None:
        _require(math.isfinite(self.start_seconds) and self.start_seconds >= 0, "start_seconds must be >= 0")

    def check(self, fleet: FleetShape) -> None:
        _require(0 <= self.host < fleet.host_count, f"{self}: host {self.host} is not in the fleet")
        _require(0 <= self.port < fleet.ports_per_host, f"{self}: port {self.port} is not on the host")


@dataclass(frozen=True, kw_only=True)
class EccRampThenDbe(_GpuFault):
    """Single-bit ECC errors climb faster and faster and rows get remapped, then a double-bit error (XID 48).

    The uncorrected counters rise by exactly one at `start_seconds + ramp_seconds`.
    """

    ramp_seconds: float = 600.0
    corrected_errors: int = 400
    remapped_rows: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.ramp_seconds > 0, "ramp_seconds must be > 0")
        _require(self.corrected_errors >= 0 and self.remapped_rows >= 0, "error counts must be >= 0")

    @property
    def dbe_seconds(self) -> float:
        return self.start_seconds + self.ramp_seconds

    def _corrected_at(self, t: float) -> int:
        p = _progress(t, self.start_seconds, self.ramp_seconds)
        return round(self.corrected_errors * p * p)  # accelerating, as a failing HBM row does

    def _remapped_at(self, t: float) -> int:
        return int(self.remapped_rows * _progress(t, self.start_seconds, self.ramp_seconds))

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        gpu = target.gpu(self.host, self.gpu)
        if gpu.lost:
            return
        gpu.add_ecc(corrected=self._corrected_at(t1) - self._corrected_at(t0))
        for _ in range(self._remapped_at(t1) - self._remapped_at(t0)):
            gpu.remapped_rows_corrected += 1
            target.kernel_xid(self.host, gpu, 63, owned=False)
        if _crossed(t0, t1, self.dbe_seconds):
            gpu.add_ecc(uncorrected=1)
            target.kernel_xid(self.host, gpu, 48)
            gpu.remapped_rows_uncorrected += 1
            gpu.remapped_rows_pending = True  # the remap takes effect at the next GPU reset
            target.kernel_xid(self.host, gpu, 63, owned=False)


@dataclass(frozen=True, kw_only=True)
class GpuFallOffBus(_GpuFault):
    """The GPU drops off PCIe: XID 79 and "fallen off the bus" in the kernel log, then NVML calls it lost."""

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        gpu = target.gpu(self.host, self.gpu)
        if gpu.lost or not _crossed(t0, t1, self.start_seconds):
            return
        target.kernel_xid(self.host, gpu, 79, owned=False)
        target.kernel_line(self.host, EventKind.GPU_FALLEN_OFF_BUS, fallen_off_bus_line(gpu.pci_bus_id), gpu)
        gpu.lost = True


@dataclass(frozen=True, kw_only=True)
class XidStorm(_GpuFault):
    """`events` XID lines spread evenly over `duration_seconds`, cycling through `xids`; raw repeats."""

    events: int = 200
    duration_seconds: float = 30.0
    xids: tuple[int, ...] = (13, 31, 43)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.events >= 1, "events must be >= 1")
        _require(self.duration_seconds >= 0, "duration_seconds must be >= 0")
        _require(bool(self.xids), "xids must not be empty")
        unknown = sorted(set(self.xids) - set(XID_DETAILS))
        _require(not unknown, f"cannot word XID {unknown}; known: {sorted(XID_DETAILS)}")

    def _emitted_by(self, t: float) -> int:
        # Event k happens at start + k * duration / events, k = 0 .. events-1.
        if t < self.start_seconds:
            return 0
        if self.duration_seconds <= 0:
            return self.events
        return min(
            self.events, math.floor((t - self.start_seconds) * self.events / self.duration_seconds) + 1
        )

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        gpu = target.gpu(self.host, self.gpu)
        if gpu.lost:
            return
        for k in range(self._emitted_by(t0), self._emitted_by(t1)):
            target.kernel_xid(self.host, gpu, self.xids[k % len(self.xids)])


@dataclass(frozen=True, kw_only=True)
class NvlinkCrcBurst(_GpuFault):
    """NVLink CRC flit/data, replay and recovery counters jump over `duration_seconds`.

    With `fatal_link` the burst ends with XID 74 and one link going inactive.
    """

    duration_seconds: float = 60.0
    crc_flit_errors: int = 5000
    crc_data_errors: int = 200
    replay_errors: int = 300
    recovery_errors: int = 2
    fatal_link: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.duration_seconds >= 0, "duration_seconds must be >= 0")
        counts = (self.crc_flit_errors, self.crc_data_errors, self.replay_errors, self.recovery_errors)
        _require(min(counts) >= 0, "error counts must be >= 0")

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        gpu = target.gpu(self.host, self.gpu)
        if gpu.lost:
            return
        p0 = _progress(t0, self.start_seconds, self.duration_seconds)
        p1 = _progress(t1, self.start_seconds, self.duration_seconds)
        if p1 > p0:
            gpu.nvlink_crc_flit_errors += int(self.crc_flit_errors * p1) - int(self.crc_flit_errors * p0)
            gpu.nvlink_crc_data_errors += int(self.crc_data_errors * p1) - int(self.crc_data_errors * p0)
            gpu.nvlink_replay_errors += int(self.replay_errors * p1) - int(self.replay_errors * p0)
            gpu.nvlink_recovery_errors += int(self.recovery_errors * p1) - int(self.recovery_errors * p0)
        if self.fatal_link and _crossed(t0, t1, self.start_seconds + self.duration_seconds):
            target.kernel_xid(self.host, gpu, 74, owned=False)
            gpu.nvlink_links_active = max(0, gpu.nvlink_links_active - 1)


@dataclass(frozen=True, kw_only=True)
class ThermalThrottle(_GpuFault):
    """Cooling fails: temperature rises to `peak_celsius` over `ramp_seconds`, holds, and falls back.

    Above the max operating temperature (87 C) the GPU reports SW thermal slowdown; above the slowdown
    temperature (89 C) HW (thermal) slowdown, with the SM clock halved.
    `duration_seconds` includes both ramps.
    """

    duration_seconds: float = 180.0
    ramp_seconds: float = 45.0
    peak_celsius: float = 91.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.ramp_seconds > 0, "ramp_seconds must be > 0")
        _require(
            self.duration_seconds >= 2 * self.ramp_seconds, "duration_seconds must be >= 2 * ramp_seconds"
        )
        _require(60.0 < self.peak_celsius <= 120.0, "peak_celsius must be within (60, 120]")

    def temperature_floor_at(self, t: float) -> float:
        """The temperature the failing cooling forces at `t` (0 outside the fault)."""
        rising = _progress(t, self.start_seconds, self.ramp_seconds)
        falling = _progress(
            t, self.start_seconds + self.duration_seconds - self.ramp_seconds, self.ramp_seconds
        )
        level = rising - falling
        return 60.0 + (self.peak_celsius - 60.0) * level if level > 0 else 0.0

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        gpu = target.gpu(self.host, self.gpu)
        floor = self.temperature_floor_at(t1)
        if floor > gpu.temperature_floor_celsius:
            gpu.temperature_floor_celsius = floor


@dataclass(frozen=True, kw_only=True)
class IbSymbolErrors(_PortFault):
    """A marginal cable or transceiver: symbol errors (and some receive errors) at a high rate for a while."""

    duration_seconds: float = 120.0
    symbol_errors_per_second: float = 50.0
    port_rcv_errors_per_second: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.duration_seconds >= 0, "duration_seconds must be >= 0")
        _require(
            min(self.symbol_errors_per_second, self.port_rcv_errors_per_second) >= 0, "rates must be >= 0"
        )

    def _count_by(self, t: float, rate_per_second: float) -> int:
        return int(
            rate_per_second * self.duration_seconds * _progress(t, self.start_seconds, self.duration_seconds)
        )

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        port = target.port(self.host, self.port)
        for counter, rate in (
            ("symbol_error", self.symbol_errors_per_second),
            ("port_rcv_errors", self.port_rcv_errors_per_second),
        ):
            port.add(counter, self._count_by(t1, rate) - self._count_by(t0, rate))


@dataclass(frozen=True, kw_only=True)
class IbLinkFlap(_PortFault):
    """The link goes ACTIVE -> DOWN -> ACTIVE `flaps` times; each flap adds one to link_downed.

    A flap shorter than the sampling interval is seen only in link_downed, as on real hardware.
    """

    down_seconds: float = 6.0
    flaps: int = 1
    interval_seconds: float = 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.down_seconds > 0, "down_seconds must be > 0")
        _require(self.flaps >= 1, "flaps must be >= 1")
        _require(
            self.flaps == 1 or self.interval_seconds > self.down_seconds, "interval_seconds must exceed down"
        )

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        port = target.port(self.host, self.port)
        for i in range(self.flaps):
            down_at = self.start_seconds + i * self.interval_seconds
            if _crossed(t0, t1, down_at):
                port.state, port.phys_state = "DOWN", "Polling"
                port.add("link_downed", 1)
            if _crossed(t0, t1, down_at + self.down_seconds):
                port.state, port.phys_state = "ACTIVE", "LinkUp"


@dataclass(frozen=True, kw_only=True)
class IbCounterReset(_PortFault):
    """The mlx5 driver reloads: every counter of the port restarts from zero (readers must see a reset)."""

    def apply(self, target: FaultTarget, t0: float, t1: float) -> None:
        if _crossed(t0, t1, self.start_seconds):
            target.port(self.host, self.port).reset_counters()


def default_demo_faults(fleet: FleetShape) -> list[FaultScript]:
    """A mix of faults over the first three minutes, so `fleetguard up --simulate 2x8` shows each kind."""
    hosts, gpus, ports = fleet.host_count, fleet.gpus_per_host, fleet.ports_per_host

    def host(slot: int) -> int:
        return slot % hosts

    faults: list[FaultScript] = [
        ThermalThrottle(host=host(0), gpu=3 % gpus, start_seconds=20, duration_seconds=150, ramp_seconds=40),
        EccRampThenDbe(host=host(1), gpu=2 % gpus, start_seconds=30, ramp_seconds=100, corrected_errors=300),
        XidStorm(host=host(2), gpu=5 % gpus, start_seconds=40, duration_seconds=20, events=40),
        NvlinkCrcBurst(host=host(3), gpu=6 % gpus, start_seconds=60, duration_seconds=40),
        GpuFallOffBus(host=host(4), gpu=7 % gpus, start_seconds=170),
    ]
    if ports:
        faults += [
            IbSymbolErrors(host=host(5), port=2 % ports, start_seconds=45, duration_seconds=90),
            IbLinkFlap(host=host(6), port=4 % ports, start_seconds=100, down_seconds=8),
        ]
    return sorted(faults, key=lambda f: f.start_seconds)
