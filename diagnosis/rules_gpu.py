"""NVML samples as observations: row remapping, ECC, throttling, temperature, NVLink and PCIe errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from diagnosis.model import ComponentKind, Deferred, IncidentKey, Observation, RepairAction, Severity
from diagnosis.policy import GpuRules
from fleetguard.records.telemetry import GpuSample

# nvmlClocksEventReasons bits.
_SW_POWER_CAP = 0x4
_HW_SLOWDOWN = 0x8
_SW_THERMAL = 0x20
_HW_THERMAL = 0x40
_HW_POWER_BRAKE = 0x80
THERMAL_BITS = _SW_THERMAL | _HW_THERMAL | _HW_SLOWDOWN
# A software power cap is routine for a GPU working at its power limit; only the hardware brake is a fault.
POWER_BITS = _HW_POWER_BRAKE


# The sample fields these rules read: a reader may load only these (a GpuSample has ~50).
GPU_RULE_FIELDS = frozenset(
    {
        "ts",
        "host",
        "gpu_index",
        "uuid",
        "pci_bus_id",
        "clocks_event_reasons",
        "temperature_celsius",
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "remapped_rows_pending",
        "remapped_rows_failure",
        "nvlink_crc_flit_errors",
        "pcie_replay_errors",
    }
)


# Throttle bits some rule can call a fault (whether the policy switches that rule on or not).
FAULT_BITS = THERMAL_BITS | POWER_BITS


class LastCounters(NamedTuple):
    """What the rules keep of a GPU's previous sample: its time and the counters whose increase they rate."""

    ts: float
    ecc_corrected_volatile: int | None
    ecc_uncorrected_volatile: int | None
    nvlink_crc_flit_errors: int | None
    pcie_replay_errors: int | None

    @classmethod
    def of(cls, sample: GpuSample) -> LastCounters:
        return cls(
            sample.ts,
            sample.ecc_corrected_volatile,
            sample.ecc_uncorrected_volatile,
            sample.nvlink_crc_flit_errors,
            sample.pcie_replay_errors,
        )


def may_fault(
    failure: object,
    pending: object,
    reasons: int | None,
    temperature: float | None,
    rules: GpuRules,
    rose: bool,
) -> bool:
    """Whether `gpu_observations` could say more than "healthy" of a sample with these values (`rose`: a
    counter is above the previous sample's, which is older). False is exact: such a sample yields only
    healthy observations, so a reader may skip building it. Keep in step with `gpu_observations`."""
    return bool(
        failure
        or pending
        or (reasons is not None and reasons & FAULT_BITS)
        or (temperature is not None and temperature >= rules.temperature_warn_celsius)
        or rose
    )


def says_healthy(pending: object, reasons: int | None) -> bool:
    """Whether a sample `may_fault` passed yields any healthy observation (remap none pending, not
    throttled)."""
    return pending is False or reasons is not None


def gpu_observations(
    sample: GpuSample,
    previous: LastCounters | None,
    rules: GpuRules,
    defer_healthy: bool = False,
) -> Iterator[Observation | Deferred]:
    """What one sample says, given the previous sample of the same GPU (for counters and rates). With
    `defer_healthy`, a healthy observation comes as its `Deferred` mark."""

    def obs(
        fault: str, severity: Severity, action: RepairAction, message: str, healthy: bool = False
    ) -> Observation | Deferred:
        key = IncidentKey(sample.host, ComponentKind.GPU, sample.uuid, fault)
        if healthy and defer_healthy:
            return Deferred(sample.ts, key, _RULES[fault], message)
        return Observation(
            ts=sample.ts,
            key=key,
            severity=severity,
            action=action,
            rule=_RULES[fault],
            message=message,
            healthy=healthy,
        )

    if sample.remapped_rows_failure:
        yield obs("row_remap:failure", Severity.CRITICAL, rules.remap_failure_action, "row remapping failed")
    if sample.remapped_rows_pending:
        yield obs(
            "row_remap:pending", Severity.WARNING, rules.remap_pending_action, "row remap pending (reset)"
        )
    elif sample.remapped_rows_pending is False:
        yield obs(
            "row_remap:none_pending", Severity.INFO, RepairAction.NONE, "no remap pending", healthy=True
        )
    yield from _throttle(sample, rules, obs)
    if (
        sample.temperature_celsius is not None
        and sample.temperature_celsius >= rules.temperature_warn_celsius
    ):
        yield obs(
            "temperature:high", Severity.WARNING, RepairAction.INSPECT, f"{sample.temperature_celsius:.0f} C"
        )
    if previous is None or sample.ts <= previous.ts:
        return
    seconds = sample.ts - previous.ts
    new_dbe = _increase(previous.ecc_uncorrected_volatile, sample.ecc_uncorrected_volatile)
    if new_dbe:
        yield obs(
            "ecc:uncorrected",
            Severity.CRITICAL,
            rules.uncorrected_ecc_action,
            f"{new_dbe} new uncorrected ECC errors",
        )
    sbe = _increase(previous.ecc_corrected_volatile, sample.ecc_corrected_volatile)
    if sbe and sbe / seconds * 3600.0 >= rules.corrected_ecc_per_hour_warn:
        yield obs(
            "ecc:corrected_rate",
            Severity.WARNING,
            RepairAction.WATCH,
            f"{sbe / seconds * 3600.0:.0f} corrected ECC/h",
        )
    crc = _increase(previous.nvlink_crc_flit_errors, sample.nvlink_crc_flit_errors)
    if crc and crc / seconds >= rules.nvlink_crc_per_second_warn:
        yield obs(
            "nvlink:crc_rate",
            Severity.WARNING,
            RepairAction.INSPECT,
            f"{crc / seconds:.1f} NVLink CRC errors/s",
        )
    replay = _increase(previous.pcie_replay_errors, sample.pcie_replay_errors)
    if replay and replay / seconds >= rules.pcie_replay_per_second_warn:
        yield obs(
            "pcie:replay_rate",
            Severity.WARNING,
            RepairAction.INSPECT,
            f"{replay / seconds:.1f} PCIe replays/s",
        )


def _throttle(
    sample: GpuSample, rules: GpuRules, make: Callable[..., Observation | Deferred]
) -> Iterator[Observation | Deferred]:
    reasons = sample.clocks_event_reasons
    if reasons is None:
        return
    if rules.thermal_throttle and reasons & THERMAL_BITS:
        yield make(
            "throttle:thermal", Severity.WARNING, RepairAction.INSPECT, f"thermal throttling (0x{reasons:x})"
        )
    if rules.power_throttle and reasons & POWER_BITS:
        yield make(
            "throttle:power", Severity.WARNING, RepairAction.WATCH, f"power throttling (0x{reasons:x})"
        )
    if not reasons & (THERMAL_BITS | POWER_BITS):  # a software power cap alone is healthy
        yield make("throttle:none", Severity.INFO, RepairAction.NONE, "not throttled", healthy=True)


class _RuleNames(dict[str, str]):
    def __missing__(self, fault: str) -> str:
        self[fault] = name = f"gpu.{fault.replace(':', '.')}"
        return name


_RULES = _RuleNames()  # fault -> rule name, made once per fault rather than once per sample


def _increase(before: int | None, after: int | None) -> int:
    """A counter's increase; a decrease is a reset (driver reload), not a negative count."""
    if before is None or after is None or after < before:
        return 0
    return after - before
