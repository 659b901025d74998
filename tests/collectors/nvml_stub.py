"""A scripted stand-in for the NVIDIA driver behind pynvml, installed by monkeypatching the real module.

Each `FakeGpu` holds what its NVML queries answer; `errors` maps a pynvml function name to the NVML error code
it raises, built as real pynvml error objects (`pynvml.NVMLError(code)` is the matching subclass), so the code
under test sees exactly what a driver would make pynvml raise. `lost = True` makes every query of that GPU
raise GPU_IS_LOST.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE = pynvml.NVML_VOLATILE_ECC
AGGREGATE = pynvml.NVML_AGGREGATE_ECC
SBE = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
DBE = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
CRC_FLIT = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
CRC_DATA = pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA
REPLAY = pynvml.NVML_NVLINK_ERROR_DL_REPLAY
RECOVERY = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY


@dataclass
class FakeNvLink:
    active: bool = True
    errors: dict[int, int] = field(default_factory=lambda: {CRC_FLIT: 0, CRC_DATA: 0, REPLAY: 0, RECOVERY: 0})


def h100_nvlinks() -> dict[int, FakeNvLink]:
    """18 active NVLink 4 links, as on an H100 SXM."""
    return {link: FakeNvLink() for link in range(18)}


@dataclass
class FakeGpu:
    """An H100 SXM by default: every field supported, numbers as nvidia-smi -q would show them."""

    index: int = 0
    uuid: str = "GPU-5f2c1a7e-0000-4c4e-9a3b-000000000000"
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = "1652223012345"
    bus_id: bytes = b"00000000:18:00.0"  # as NVML writes it: 8-digit domain, upper case
    utilization_gpu: int = 97
    utilization_memory: int = 41
    memory_used: int = 71_000_000_000
    memory_total: int = 85_520_809_984
    temperature: int = 52
    power_mw: int = 612_345
    energy_mj: int = 9_876_543_210
    sm_clock_mhz: int = 1980
    memory_clock_mhz: int = 2619
    pstate: int = 0
    clocks_event_reasons: int = 0x4  # SW power cap
    ecc: dict[tuple[int, int], int] = field(
        default_factory=lambda: {
            (CORRECTED, VOLATILE): 3,
            (UNCORRECTED, VOLATILE): 0,
            (CORRECTED, AGGREGATE): 17,
            (UNCORRECTED, AGGREGATE): 1,
        }
    )
    retired_pages: dict[int, list[int]] = field(default_factory=dict)
    retired_pages_pending: int = pynvml.NVML_FEATURE_DISABLED
    remapped_rows: tuple[int, int, int, int] = (2, 1, 0, 0)
    pcie_replay: int = 5
    pcie_tx_kib: int = 1_250_000
    pcie_rx_kib: int = 3_500_000
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    nvlinks: dict[int, FakeNvLink] = field(default_factory=h100_nvlinks)
    errors: dict[str, int] = field(default_factory=dict)
    lost: bool = False


def h100(index: int) -> FakeGpu:
    return FakeGpu(
        index=index,
        uuid=f"GPU-5f2c1a7e-{index:04d}-4c4e-9a3b-00000000000{index}",
        serial=f"16522230123{index:02d}",
        bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0".encode(),
    )


def volta(index: int = 0) -> FakeGpu:
    """A V100: pages retired on ECC errors, no row remapping (that came with Ampere), 6 NVLink 2 links."""
    return FakeGpu(
        index=index,
        uuid="GPU-0b9e2c11-7d3a-6f45-1c2d-abcdefabcdef",
        name="Tesla V100-SXM2-32GB",
        serial="0323218000001",
        bus_id=b"00000000:3B:00.0",
        memory_total=34_359_738_368,
        power_mw=254_000,
        pcie_gen=3,
        pcie_gen_max=3,
        retired_pages={SBE: [0x1F2A3000, 0x1F2A4000], DBE: [0x2B3C4000]},
        retired_pages_pending=pynvml.NVML_FEATURE_ENABLED,
        nvlinks={link: FakeNvLink() for link in range(6)},
        errors={"nvmlDeviceGetRemappedRows": pynvml.NVML_ERROR_NOT_SUPPORTED},
    )


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """The driver side of pynvml for a list of FakeGpus; `calls` counts every pynvml function called."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: int | None = None,
        driver_version: str = "550.90.07",
        system_errors: dict[str, int] | None = None,
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver_version = driver_version
        self.system_errors = system_errors or {}
        self.calls: Counter[str] = Counter()
        self.pending_xids: list[tuple[int, int]] = []  # (gpu index, XID) waiting in the event set
        self.registered: set[int] = set()
        self.event_sets_freed = 0
        self.shutdowns = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name, fn in self._system_functions().items():
            monkeypatch.setattr(pynvml, name, self._counted(name, fn))
        for name, read in self._device_functions().items():
            monkeypatch.setattr(pynvml, name, self._device(name, read))
        return self

    def xid(self, gpu_index: int, xid: int) -> None:
        """The driver reports XID `xid` on GPU `gpu_index` (delivered only if the GPU was registered)."""
        if gpu_index in self.registered:
            self.pending_xids.append((gpu_index, xid))

    # ---- plumbing --------------------------------------------------------------------------------------

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.calls[name] += 1
            code = self.system_errors.get(name)
            if code is not None:
                raise nvml_error(code)
            return fn(*args)

        return call

    def _device(self, name: str, read: Callable[..., Any]) -> Callable[..., Any]:
        def call(handle: FakeGpu, *args: Any) -> Any:
            self.calls[name] += 1
            if handle.lost:
                raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
            code = handle.errors.get(name)
            if code is not None:
                raise nvml_error(code)
            return read(handle, *args)

        return call

    def _system_functions(self) -> dict[str, Callable[..., Any]]:
        def init() -> None:
            if self.init_error is not None:
                raise nvml_error(self.init_error)

        def shutdown() -> None:
            self.shutdowns += 1

        def handle_by_index(index: int) -> FakeGpu:
            gpu = self.gpus[index]
            if gpu.lost:
                raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
            return gpu

        def handle_by_uuid(uuid: str) -> FakeGpu:
            for gpu in self.gpus:
                if gpu.uuid == uuid and not gpu.lost:
                    return gpu
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

        def register(handle: FakeGpu, types: int, event_set: object) -> None:
            code = handle.errors.get("nvmlDeviceRegisterEvents")
            if code is not None:
                raise nvml_error(code)
            assert types & pynvml.nvmlEventTypeXidCriticalError
            self.registered.add(handle.index)

        def wait(event_set: object, timeout_ms: int) -> SimpleNamespace:
            assert timeout_ms == 0, "the collector must never block on the event set"
            if not self.pending_xids:
                raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
            index, xid = self.pending_xids.pop(0)
            return SimpleNamespace(
                device=self.gpus[index],
                eventType=pynvml.nvmlEventTypeXidCriticalError,
                eventData=xid,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )

        def free(event_set: object) -> None:
            self.event_sets_freed += 1

        return {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlSystemGetDriverVersion": lambda: self.driver_version,
            "nvmlDeviceGetHandleByIndex": handle_by_index,
            "nvmlDeviceGetHandleByUUID": handle_by_uuid,
            "nvmlDeviceGetIndex": lambda handle: handle.index,
            "nvmlEventSetCreate": lambda: object(),
            "nvmlDeviceRegisterEvents": register,
            "nvmlEventSetWait_v2": wait,
            "nvmlEventSetFree": free,
        }

    @staticmethod
    def _device_functions() -> dict[str, Callable[..., Any]]:
        def nvlink(gpu: FakeGpu, link: int) -> FakeNvLink:
            if link >= pynvml.NVML_NVLINK_MAX_LINKS or (gpu.nvlinks and link >= max(gpu.nvlinks) + 1):
                raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if link not in gpu.nvlinks:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return gpu.nvlinks[link]

        def retired_pages(gpu: FakeGpu, cause: int) -> list[int]:
            return list(gpu.retired_pages.get(cause, []))

        return {
            "nvmlDeviceGetUUID": lambda g: g.uuid,
            "nvmlDeviceGetName": lambda g: g.name,
            "nvmlDeviceGetSerial": lambda g: g.serial,
            "nvmlDeviceGetPciInfo": lambda g: SimpleNamespace(busId=g.bus_id, busIdLegacy=g.bus_id),
            "nvmlDeviceGetUtilizationRates": lambda g: SimpleNamespace(
                gpu=g.utilization_gpu, memory=g.utilization_memory
            ),
            "nvmlDeviceGetMemoryInfo": lambda g: SimpleNamespace(
                used=g.memory_used, total=g.memory_total, free=g.memory_total - g.memory_used
            ),
            "nvmlDeviceGetTemperature": lambda g, sensor: g.temperature,
            "nvmlDeviceGetPowerUsage": lambda g: g.power_mw,
            "nvmlDeviceGetTotalEnergyConsumption": lambda g: g.energy_mj,
            "nvmlDeviceGetClockInfo": lambda g, clock: {
                pynvml.NVML_CLOCK_SM: g.sm_clock_mhz,
                pynvml.NVML_CLOCK_MEM: g.memory_clock_mhz,
            }[clock],
            "nvmlDeviceGetPerformanceState": lambda g: g.pstate,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda g: g.clocks_event_reasons,
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda g: g.clocks_event_reasons,
            "nvmlDeviceGetTotalEccErrors": lambda g, kind, counter: g.ecc[(kind, counter)],
            "nvmlDeviceGetRetiredPages": retired_pages,
            "nvmlDeviceGetRetiredPagesPendingStatus": lambda g: g.retired_pages_pending,
            "nvmlDeviceGetRemappedRows": lambda g: g.remapped_rows,
            "nvmlDeviceGetPcieReplayCounter": lambda g: g.pcie_replay,
            "nvmlDeviceGetPcieThroughput": lambda g, counter: {
                pynvml.NVML_PCIE_UTIL_TX_BYTES: g.pcie_tx_kib,
                pynvml.NVML_PCIE_UTIL_RX_BYTES: g.pcie_rx_kib,
            }[counter],
            "nvmlDeviceGetCurrPcieLinkGeneration": lambda g: g.pcie_gen,
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda g: g.pcie_gen_max,
            "nvmlDeviceGetCurrPcieLinkWidth": lambda g: g.pcie_width,
            "nvmlDeviceGetMaxPcieLinkWidth": lambda g: g.pcie_width_max,
            "nvmlDeviceGetNvLinkState": lambda g, link: (
                pynvml.NVML_FEATURE_ENABLED if nvlink(g, link).active else pynvml.NVML_FEATURE_DISABLED
            ),
            "nvmlDeviceGetNvLinkErrorCounter": lambda g, link, counter: nvlink(g, link).errors[counter],
        }
