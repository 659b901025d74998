"""One wrapper for every NVML query: a value, None where this GPU or driver lacks the field, or `GpuLost`.

The collector never sees an NVMLError. A field this GPU, driver or pynvml binding does not have
(NOT_SUPPORTED, FUNCTION_NOT_FOUND, DEPRECATED, or a function the installed pynvml lacks) reads as None, is
counted once and is not asked again: it will not appear later, and asking costs a driver call per round.
Any other failure of one query (no permission, timeout, an unexpected code) reads as None and is counted every
time. GPU_IS_LOST and RESET_REQUIRED raise `GpuLost`; UNKNOWN raises it only when a liveness probe of the same
GPU fails too, so one odd field on a healthy GPU stays one missing field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields
from typing import Any, Final

import pynvml

# The field does not exist here; it will not appear while this driver runs.
UNSUPPORTED_CODES: Final = frozenset(
    {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_DEPRECATED}
)
# The GPU itself is gone or unusable until reset: a finding, not a missing field.
LOST_CODES: Final = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})

_ERROR_PREFIX: Final = "NVML_ERROR_"
_REASONS: Final[dict[int, str]] = {
    getattr(pynvml, name): name[len(_ERROR_PREFIX) :].lower()
    for name in dir(pynvml)
    if name.startswith(_ERROR_PREFIX) and isinstance(getattr(pynvml, name), int)
}


def error_reason(code: int) -> str:
    """Problem-count reason for an NVML return code: NVML_ERROR_NO_PERMISSION -> "no_permission"."""
    return _REASONS.get(code, f"error_{code}")


def error_text(error: pynvml.NVMLError) -> str:
    """The NVML message for an error; never raises (str() may call into a library that is not loaded)."""
    try:
        return str(error)
    except Exception:
        return error_reason(getattr(error, "value", -1)).replace("_", " ")


class GpuLost(Exception):
    """NVML says this GPU is gone (GPU_IS_LOST, RESET_REQUIRED, or UNKNOWN confirmed by a liveness probe)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _raises_function_not_found(*_args: Any) -> Any:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


@dataclass(frozen=True, slots=True)
class NvmlApi:
    """The pynvml functions the collector calls, resolved once. Each field's metadata is its pynvml name.

    A function the installed pynvml lacks resolves to one that raises FUNCTION_NOT_FOUND, so an old binding
    reads like an old driver: the field is None.
    """

    init: Callable[..., Any]
    shutdown: Callable[..., Any]
    device_count: Callable[..., Any]
    handle_by_index: Callable[..., Any]
    handle_by_uuid: Callable[..., Any]
    device_index: Callable[..., Any]
    driver_version: Callable[..., Any]
    uuid: Callable[..., Any]
    name: Callable[..., Any]
    serial: Callable[..., Any]
    pci_info: Callable[..., Any]
    utilization: Callable[..., Any]
    memory_info: Callable[..., Any]
    temperature: Callable[..., Any]
    power_usage: Callable[..., Any]
    total_energy: Callable[..., Any]
    clock_info: Callable[..., Any]
    performance_state: Callable[..., Any]
    clocks_event_reasons: Callable[..., Any]
    clocks_throttle_reasons: Callable[..., Any]
    total_ecc_errors: Callable[..., Any]
    retired_pages: Callable[..., Any]
    retired_pages_pending: Callable[..., Any]
    remapped_rows: Callable[..., Any]
    pcie_replay_counter: Callable[..., Any]
    pcie_throughput: Callable[..., Any]
    pcie_link_gen: Callable[..., Any]
    pcie_link_gen_max: Callable[..., Any]
    pcie_link_width: Callable[..., Any]
    pcie_link_width_max: Callable[..., Any]
    nvlink_state: Callable[..., Any]
    nvlink_error_counter: Callable[..., Any]
    event_set_create: Callable[..., Any]
    register_events: Callable[..., Any]
    event_set_wait: Callable[..., Any]
    event_set_free: Callable[..., Any]
    violation_status: Callable[..., Any]
    compute_processes: Callable[..., Any]
    gpm_query_support: Callable[..., Any]
    gpm_sample_alloc: Callable[..., Any]
    gpm_sample_free: Callable[..., Any]
    gpm_sample_get: Callable[..., Any]
    gpm_metrics_get: Callable[..., Any]

    @classmethod
    def from_module(cls, module: Any) -> NvmlApi:
        """Resolve every function from `module` (pynvml, or a stand-in with the same names)."""
        return cls(
            **{
                f.name: getattr(module, _PYNVML_NAMES[f.name], None) or _raises_function_not_found
                for f in fields(cls)
            }
        )


_PYNVML_NAMES: Final[dict[str, str]] = {
    "init": "nvmlInit",
    "shutdown": "nvmlShutdown",
    "device_count": "nvmlDeviceGetCount",
    "handle_by_index": "nvmlDeviceGetHandleByIndex",
    "handle_by_uuid": "nvmlDeviceGetHandleByUUID",
    "device_index": "nvmlDeviceGetIndex",
    "driver_version": "nvmlSystemGetDriverVersion",
    "uuid": "nvmlDeviceGetUUID",
    "name": "nvmlDeviceGetName",
    "serial": "nvmlDeviceGetSerial",
    "pci_info": "nvmlDeviceGetPciInfo",
    "utilization": "nvmlDeviceGetUtilizationRates",
    "memory_info": "nvmlDeviceGetMemoryInfo",
    "temperature": "nvmlDeviceGetTemperature",
    "power_usage": "nvmlDeviceGetPowerUsage",
    "total_energy": "nvmlDeviceGetTotalEnergyConsumption",
    "clock_info": "nvmlDeviceGetClockInfo",
    "performance_state": "nvmlDeviceGetPerformanceState",
    "clocks_event_reasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "clocks_throttle_reasons": "nvmlDeviceGetCurrentClocksThrottleReasons",
    "total_ecc_errors": "nvmlDeviceGetTotalEccErrors",
    "retired_pages": "nvmlDeviceGetRetiredPages",
    "retired_pages_pending": "nvmlDeviceGetRetiredPagesPendingStatus",
    "remapped_rows": "nvmlDeviceGetRemappedRows",
    "pcie_replay_counter": "nvmlDeviceGetPcieReplayCounter",
    "pcie_throughput": "nvmlDeviceGetPcieThroughput",
    "pcie_link_gen": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_link_gen_max": "nvmlDeviceGetMaxPcieLinkGeneration",
    "pcie_link_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_link_width_max": "nvmlDeviceGetMaxPcieLinkWidth",
    "nvlink_state": "nvmlDeviceGetNvLinkState",
    "nvlink_error_counter": "nvmlDeviceGetNvLinkErrorCounter",
    "event_set_create": "nvmlEventSetCreate",
    "register_events": "nvmlDeviceRegisterEvents",
    "event_set_wait": "nvmlEventSetWait_v2",
    "event_set_free": "nvmlEventSetFree",
    "violation_status": "nvmlDeviceGetViolationStatus",
    "compute_processes": "nvmlDeviceGetComputeRunningProcesses",
    "gpm_query_support": "nvmlGpmQueryDeviceSupport",
    "gpm_sample_alloc": "nvmlGpmSampleAlloc",
    "gpm_sample_free": "nvmlGpmSampleFree",
    "gpm_sample_get": "nvmlGpmSampleGet",
    "gpm_metrics_get": "nvmlGpmMetricsGet",
}


class DeviceQueries:
    """Every query of one GPU goes through `get`, keyed by what it reads (a GpuSample field name, say).

    `probe` is the liveness query (nvmlDeviceGetMemoryInfo, which every NVIDIA GPU answers); its value is
    returned so that the reading is not wasted.
    """

    __slots__ = ("_probe_fn", "_problems", "_unsupported", "handle")

    def __init__(self, handle: Any, problems: Counter[str], probe: Callable[[Any], Any]) -> None:
        self.handle = handle
        self._problems = problems
        self._probe_fn = probe
        self._unsupported: dict[Hashable, int] = {}

    def get(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(handle, *args)`, or None when the field is unsupported or this one query failed."""
        if key in self._unsupported:
            return None
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as exc:
            return self._failed(key, exc)
        except Exception:  # a binding bug or a ctypes surprise costs one field, not the GPU
            self._problems["binding_error"] += 1
            return None

    def probe(self) -> Any:
        """The liveness query's value; raises GpuLost when it fails with UNKNOWN or a lost code."""
        try:
            return self._probe_fn(self.handle)
        except pynvml.NVMLError as exc:
            code = getattr(exc, "value", -1)
            if code in LOST_CODES or code == pynvml.NVML_ERROR_UNKNOWN:
                raise GpuLost(code, error_text(exc)) from None
            if code in UNSUPPORTED_CODES:
                return None
            self._problems[error_reason(code)] += 1
            return None

    def unsupported_code(self, key: Hashable) -> int | None:
        """The code that marked `key` unsupported (FUNCTION_NOT_FOUND, NOT_SUPPORTED ...), or None."""
        return self._unsupported.get(key)

    def _failed(self, key: Hashable, exc: pynvml.NVMLError) -> None:
        code = getattr(exc, "value", -1)
        if code in UNSUPPORTED_CODES:
            self._unsupported[key] = code
            self._problems[error_reason(code)] += 1
            return None
        if code in LOST_CODES:
            raise GpuLost(code, error_text(exc)) from None
        self._problems[error_reason(code)] += 1
        if code == pynvml.NVML_ERROR_UNKNOWN:
            # UNKNOWN is also how older drivers report a GPU that fell off the bus: ask something every GPU
            # answers; if that fails as well the GPU is lost, otherwise only this field is missing.
            self.probe()
        return None
