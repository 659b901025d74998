"""What the dashboard observes of GPUs and ports from their newest samples, and the colour of each state.

The states themselves and how a host's or part's health is decided (open incidents and liveness, with these
observations able only to make a part worse) are the one health model in `diagnosis.health`, shared with
`fleetguard status`, the read API and /metrics. One vocabulary and one colour per state across every page:
failed (red) > silent (grey) > degraded (amber) > healthy (green).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from diagnosis.health import SEVERITY_ORDER as SEVERITY_ORDER  # re-exported for the pages
from diagnosis.health import Health as Health
from diagnosis.health import worst as worst

COLOURS: Final[dict[Health, str]] = {
    Health.HEALTHY: "#2e9e5b",
    Health.DEGRADED: "#e0a800",
    Health.FAILED: "#d64545",
    Health.SILENT: "#7a8594",
}

# A GPU or port with no sample for this long has stopped reporting (its agent, host or the GPU is gone).
SILENT_AFTER_SECONDS: Final = 120.0
HOT_CELSIUS: Final = 85.0
# nvmlClocksEventReasons bits that mean the GPU is being slowed by heat or power, not by an idle workload:
# SW power cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80.
THROTTLE_MASK: Final = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THROTTLE_BITS: Final[dict[int, str]] = {
    0x4: "sw power cap",
    0x8: "hw slowdown",
    0x20: "sw thermal",
    0x40: "hw thermal",
    0x80: "hw power brake",
}


@dataclass(frozen=True, slots=True)
class GpuSignals:
    """What the health rules read about one GPU: its latest sample and its recent faults."""

    age_seconds: float  # since its latest sample
    lost: bool  # GPU lost / fallen off the bus recently
    fatal_xids: int  # fatal XIDs (catalogue) in the recent window
    other_xids: int  # non-application, non-fatal XIDs in the recent window
    ecc_uncorrected_volatile: int
    remapped_rows_failure: bool
    remapped_rows_pending: bool
    clocks_event_reasons: int
    temperature_celsius: float | None
    risk: float | None
    risk_threshold: float


def gpu_health(s: GpuSignals) -> tuple[Health, str]:
    """The GPU's state and the one reason an operator reads first."""
    if s.lost:
        return Health.FAILED, "GPU lost"
    if s.age_seconds > SILENT_AFTER_SECONDS:
        return Health.SILENT, f"no sample for {s.age_seconds:.0f} s"
    if s.fatal_xids > 0:
        return Health.FAILED, f"{s.fatal_xids} fatal XID(s)"
    if s.remapped_rows_failure:
        return Health.FAILED, "row remapping failed"
    if s.ecc_uncorrected_volatile > 0:
        return Health.FAILED, f"{s.ecc_uncorrected_volatile} uncorrectable ECC"
    if s.remapped_rows_pending:
        return Health.DEGRADED, "row remap pending (reset needed)"
    if s.clocks_event_reasons & THROTTLE_MASK:
        return Health.DEGRADED, "throttled: " + throttle_text(s.clocks_event_reasons)
    if s.other_xids > 0:
        return Health.DEGRADED, f"{s.other_xids} XID(s)"
    if s.temperature_celsius is not None and s.temperature_celsius >= HOT_CELSIUS:
        return Health.DEGRADED, f"hot ({s.temperature_celsius:.0f} °C)"
    if s.risk is not None and s.risk >= s.risk_threshold:
        return Health.DEGRADED, f"at risk ({s.risk:.2f})"
    return Health.HEALTHY, ""


@dataclass(frozen=True, slots=True)
class PortSignals:
    age_seconds: float
    state: str | None
    link_downed_delta: int  # in the recent window
    error_delta: int  # symbol, receive, integrity ... errors in the recent window


def port_health(s: PortSignals) -> tuple[Health, str]:
    if s.age_seconds > SILENT_AFTER_SECONDS:
        return Health.SILENT, f"no sample for {s.age_seconds:.0f} s"
    if s.state is not None and s.state != "ACTIVE":
        return Health.FAILED, f"port {s.state}"
    if s.link_downed_delta > 0:
        return Health.DEGRADED, f"{s.link_downed_delta} link flap(s)"
    if s.error_delta > 0:
        return Health.DEGRADED, f"{s.error_delta} errors"
    return Health.HEALTHY, ""


def throttle_text(reasons: int) -> str:
    names = [name for bit, name in THROTTLE_BITS.items() if reasons & bit]
    return ", ".join(names) if names else "none"
