"""How often each GPU field is read, and the one place a `GpuSample` is built.

On an H100 (driver 580, tests/fixtures/h100/nvml-call-costs.json) most NVML queries cost 2-9 µs of CPU, but
the energy counter costs ~3.9 ms, PCIe throughput 0.76 ms (and 21 ms of wall time), a violation-time query
0.7 ms and the PCIe replay counter 0.15 ms. Reading everything every round cost ~4 ms of CPU per GPU per
round; the cadence below costs ~0.25 ms (bench/nvml_cost.py):

- every round: `FastReading` (utilisation, memory, temperature, power, clocks, performance state, clocks
  event reasons, ECC totals, retired pages, remapped rows), GPM metrics, compute processes;
- every `slow_interval_seconds` (config `collectors.nvml_slow_interval_seconds`, default 30 s): `SlowReading`
  (PCIe replay counter, current link generation and width, PCIe throughput where GPM does not offer it,
  power and thermal violation times, NVLink link state and error counters);
- derived every round: energy, the driver's counter read every `energy_interval_seconds` (default 10 slow
  intervals) plus power integrated over time in between.

A slow reading is repeated in every sample until the next one, and `GpuSample.slow_read_ts` says when it was
taken: a consumer never mistakes a repeated value for a fresh one. Slow reads of the GPUs of one host are
staggered (GPU i of n first repeats i/n of an interval later) so that one round pays for at most a few GPUs,
not for all of them at once; the first round reads everything, so `collect --once` is complete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collectors.gpu_device import FastReading, GpmReading, GpuDevice, GpuIdentity, SlowReading
from fleetguard.records.telemetry import GpuSample

DEFAULT_SLOW_INTERVAL_SECONDS = 30.0
ENERGY_READS_PER_SLOW_INTERVALS = 10


@dataclass(frozen=True, slots=True)
class SamplingPlan:
    """The cadence. `read_pcie_throughput=False` never calls nvmlDeviceGetPcieThroughput (GPM still may)."""

    slow_interval_seconds: float = DEFAULT_SLOW_INTERVAL_SECONDS
    energy_interval_seconds: float = DEFAULT_SLOW_INTERVAL_SECONDS * ENERGY_READS_PER_SLOW_INTERVALS
    read_pcie_throughput: bool = True

    def __post_init__(self) -> None:
        for name in ("slow_interval_seconds", "energy_interval_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value}")

    @classmethod
    def every(cls, slow_interval_seconds: float, *, read_pcie_throughput: bool = True) -> SamplingPlan:
        """A plan from the one configured interval; energy is re-read every 10 slow intervals."""
        return cls(
            slow_interval_seconds,
            slow_interval_seconds * ENERGY_READS_PER_SLOW_INTERVALS,
            read_pcie_throughput,
        )


class EnergyEstimate:
    """Cumulative energy between reads of the driver's counter: the last reading plus power integrated over
    time (trapezoids between rounds). Never decreases: when a new reading is below the estimate already
    reported, the estimate holds until the counter catches up (an exported counter that went down would read
    as a reset). A reading below the previous reading is a real reset (the driver was reloaded): it is
    reported as one."""

    __slots__ = ("_anchor_joules", "_integrated", "_last_power", "_last_ts", "_reported")

    def __init__(self) -> None:
        self._anchor_joules: float | None = None
        self._integrated = 0.0
        self._last_power: float | None = None
        self._last_ts: float | None = None
        self._reported: float | None = None

    def anchor(self, joules: float | None, now: float) -> None:
        """A fresh reading of the counter (None: the GPU has none, and neither will the estimate)."""
        if joules is not None and self._anchor_joules is not None and joules < self._anchor_joules:
            self._reported = None  # the counter restarted: no holding on to the old count
        self._anchor_joules = joules
        self._integrated = 0.0
        self._last_ts = now

    def advance(self, power_watts: float | None, now: float) -> float | None:
        """The estimate at `now`, given the power read now. Time that runs backwards adds nothing."""
        if self._last_ts is not None and now > self._last_ts and power_watts is not None:
            previous = self._last_power if self._last_power is not None else power_watts
            self._integrated += (previous + power_watts) / 2.0 * (now - self._last_ts)
        if self._last_ts is None or now > self._last_ts:
            self._last_ts = now
        if power_watts is not None:
            self._last_power = power_watts
        if self._anchor_joules is None:
            return None
        estimate = self._anchor_joules + self._integrated
        if self._reported is not None and estimate < self._reported:
            return self._reported
        self._reported = estimate
        return estimate


class GpuSampler:
    """The cadence state of one GPU: when its slow fields and its energy counter are due, what they were."""

    __slots__ = ("_energy", "_energy_due", "_plan", "_slow", "_slow_due", "_slow_ts", "_stagger")

    def __init__(self, plan: SamplingPlan, stagger: float = 0.0) -> None:
        """`stagger` (0 <= s < 1): after the first, this GPU's slow reads come s intervals after GPU 0's."""
        self._plan = plan
        self._stagger = stagger
        self._slow = SlowReading()
        self._slow_ts: float | None = None
        self._slow_due = -math.inf
        self._energy = EnergyEstimate()
        self._energy_due = -math.inf

    def sample(self, device: GpuDevice, host: str, now: float) -> GpuSample:
        """Read what is due from `device` and build its sample. GpuLost from the device passes through."""
        fast = device.read_fast()
        gpm = device.read_gpm() if device.has_gpm else None
        if now >= self._slow_due:
            gpm_pcie = gpm is not None and gpm.pcie_tx_bytes_per_second is not None
            self._slow = device.read_slow(pcie_throughput=self._plan.read_pcie_throughput and not gpm_pcie)
            first = self._slow_ts is None
            self._slow_due = self._next_due(first, now, self._plan.slow_interval_seconds)
            self._slow_ts = now
        if now >= self._energy_due:
            self._energy.anchor(device.read_energy_joules(), now)
            first = self._energy_due == -math.inf
            self._energy_due = self._next_due(first, now, self._plan.energy_interval_seconds)
        energy = self._energy.advance(fast.power_watts, now)
        return build_sample(host, now, device.identity, fast, self._slow, self._slow_ts, energy, gpm)

    def _next_due(self, first: bool, now: float, interval: float) -> float:
        # After the first read (all GPUs at once), spread the GPUs of the host over one interval.
        return now + interval * (1.0 + self._stagger) if first else now + interval


def fast_sample(device: GpuDevice, host: str, now: float) -> GpuSample:
    """A sample of the device's fast reading alone, no slow read, energy or GPM taken (`slow_read_ts` is
    None, so nothing reads it as fresh): what a history sampled far apart records."""
    return build_sample(host, now, device.identity, device.read_fast(), _NO_SLOW, None, None, None)


def build_sample(
    host: str,
    now: float,
    identity: GpuIdentity,
    fast: FastReading,
    slow: SlowReading,
    slow_ts: float | None,
    energy_joules: float | None,
    gpm: GpmReading | None,
) -> GpuSample:
    """The one constructor of GpuSample from device readings (NVML and simulated alike)."""
    gpm = gpm or _NO_GPM
    gpm_pcie = gpm.pcie_tx_bytes_per_second is not None
    return GpuSample(
        ts=now,
        host=host,
        gpu_index=identity.index,
        uuid=identity.uuid,
        name=identity.name,
        serial=identity.serial,
        pci_bus_id=identity.pci_bus_id,
        driver_version=identity.driver_version,
        utilization_gpu_percent=fast.utilization_gpu_percent,
        utilization_memory_percent=fast.utilization_memory_percent,
        memory_used_bytes=fast.memory_used_bytes,
        memory_total_bytes=fast.memory_total_bytes,
        temperature_celsius=fast.temperature_celsius,
        power_watts=fast.power_watts,
        energy_joules=None if energy_joules is None else round(energy_joules, 3),
        sm_clock_mhz=fast.sm_clock_mhz,
        memory_clock_mhz=fast.memory_clock_mhz,
        performance_state=fast.performance_state,
        clocks_event_reasons=fast.clocks_event_reasons,
        ecc_corrected_volatile=fast.ecc_corrected_volatile,
        ecc_uncorrected_volatile=fast.ecc_uncorrected_volatile,
        ecc_corrected_aggregate=fast.ecc_corrected_aggregate,
        ecc_uncorrected_aggregate=fast.ecc_uncorrected_aggregate,
        retired_pages_sbe=fast.retired_pages_sbe,
        retired_pages_dbe=fast.retired_pages_dbe,
        retired_pages_pending=fast.retired_pages_pending,
        remapped_rows_corrected=fast.remapped_rows_corrected,
        remapped_rows_uncorrected=fast.remapped_rows_uncorrected,
        remapped_rows_pending=fast.remapped_rows_pending,
        remapped_rows_failure=fast.remapped_rows_failure,
        pcie_replay_errors=slow.pcie_replay_errors,
        pcie_tx_bytes_per_second=gpm.pcie_tx_bytes_per_second if gpm_pcie else slow.pcie_tx_bytes_per_second,
        pcie_rx_bytes_per_second=gpm.pcie_rx_bytes_per_second if gpm_pcie else slow.pcie_rx_bytes_per_second,
        pcie_link_gen=slow.pcie_link_gen,
        pcie_link_gen_max=identity.pcie_link_gen_max,
        pcie_link_width=slow.pcie_link_width,
        pcie_link_width_max=identity.pcie_link_width_max,
        nvlink_links_active=slow.nvlink_links_active,
        nvlink_crc_flit_errors=slow.nvlink_crc_flit_errors,
        nvlink_crc_data_errors=slow.nvlink_crc_data_errors,
        nvlink_replay_errors=slow.nvlink_replay_errors,
        nvlink_recovery_errors=slow.nvlink_recovery_errors,
        slow_read_ts=slow_ts,
        violation_power_seconds=slow.violation_power_seconds,
        violation_thermal_seconds=slow.violation_thermal_seconds,
        gpm_sm_activity_percent=gpm.sm_activity_percent,
        gpm_sm_occupancy_percent=gpm.sm_occupancy_percent,
        gpm_tensor_activity_percent=gpm.tensor_activity_percent,
        gpm_dram_bandwidth_percent=gpm.dram_bandwidth_percent,
        nvlink_tx_bytes_per_second=gpm.nvlink_tx_bytes_per_second,
        nvlink_rx_bytes_per_second=gpm.nvlink_rx_bytes_per_second,
    )


_NO_GPM = GpmReading()
_NO_SLOW = SlowReading()
