"""A scripted stand-in for the NVIDIA driver behind pynvml, installed by monkeypatching the real module.

Each `FakeGpu` holds what its NVML queries answer; `errors` maps a pynvml function name to the NVML error code
it raises, built as real pynvml error objects (`pynvml.NVMLError(code)` is the matching subclass), so the code
under test sees exactly what a driver would make pynvml raise. `lost = True` makes every query of that GPU
raise GPU_IS_LOST.

With a `CostMeter`, every call is charged the CPU (and wall) time the same call cost on a real H100
(tests/fixtures/h100/nvml-call-costs.json), so a test can assert what a sampling round costs there.
`h100_as_recorded()` answers what that H100 answered (tests/fixtures/h100/collect-once.json).
"""

from __future__ import annotations

import ctypes
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "h100"

# GPM metrics as an H100 SXM under a bf16 training load answers them (NVML_GPM_METRIC_* -> value).
H100_GPM: dict[int, float] = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 91.5,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 48.25,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 63.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 37.5,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1200.0,  # MiB/s
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3400.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 150_000.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 149_000.0,
}


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
    violation_power_ns: int = 12_500_000_000
    violation_thermal_ns: int = 0
    compute_pids: tuple[int, ...] = (4242,)
    # GPM metric id -> value, or -> NVML return code (int) for a metric the GPU answers with an error;
    # None: no GPM at all (nvmlGpmQueryDeviceSupport says isSupportedDevice = 0)
    gpm: dict[int, float | int] | None = field(default_factory=lambda: dict(H100_GPM))
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
        gpm=None,
        errors={"nvmlDeviceGetRemappedRows": pynvml.NVML_ERROR_NOT_SUPPORTED},
    )


def h100_as_recorded(index: int = 0) -> FakeGpu:
    """The H100 of tests/fixtures/h100 (idle, PCIe, alone: no NVLink, no retired pages), as NVML answered.

    GPM answered there too; its values were not recorded, so this GPU answers H100_GPM's."""
    (recorded,) = json.loads((FIXTURES / "collect-once.json").read_text())["gpu_samples"]
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    return FakeGpu(
        index=index,
        uuid=recorded["uuid"] if index == 0 else f"{recorded['uuid'][:-4]}{index:04d}",
        name=recorded["name"],
        serial=recorded["serial"],
        bus_id=b"00000000:00:06.0" if index == 0 else f"00000000:{6 + index:02X}:00.0".encode(),
        utilization_gpu=int(recorded["utilization_gpu_percent"]),
        utilization_memory=int(recorded["utilization_memory_percent"]),
        memory_used=recorded["memory_used_bytes"],
        memory_total=recorded["memory_total_bytes"],
        temperature=int(recorded["temperature_celsius"]),
        power_mw=round(recorded["power_watts"] * 1000),
        energy_mj=round(recorded["energy_joules"] * 1000),
        sm_clock_mhz=recorded["sm_clock_mhz"],
        memory_clock_mhz=recorded["memory_clock_mhz"],
        pstate=recorded["performance_state"],
        clocks_event_reasons=recorded["clocks_event_reasons"],
        ecc={
            (CORRECTED, VOLATILE): recorded["ecc_corrected_volatile"],
            (UNCORRECTED, VOLATILE): recorded["ecc_uncorrected_volatile"],
            (CORRECTED, AGGREGATE): recorded["ecc_corrected_aggregate"],
            (UNCORRECTED, AGGREGATE): recorded["ecc_uncorrected_aggregate"],
        },
        remapped_rows=(
            recorded["remapped_rows_corrected"],
            recorded["remapped_rows_uncorrected"],
            int(recorded["remapped_rows_pending"]),
            int(recorded["remapped_rows_failure"]),
        ),
        pcie_replay=recorded["pcie_replay_errors"],
        pcie_tx_kib=round(recorded["pcie_tx_bytes_per_second"] / 1024),
        pcie_rx_kib=round(recorded["pcie_rx_bytes_per_second"] / 1024),
        pcie_gen=recorded["pcie_link_gen"],
        pcie_gen_max=recorded["pcie_link_gen_max"],
        pcie_width=recorded["pcie_link_width"],
        pcie_width_max=recorded["pcie_link_width_max"],
        nvlinks={},
        compute_pids=(),
        errors={
            "nvmlDeviceGetRetiredPages": not_supported,
            "nvmlDeviceGetRetiredPagesPendingStatus": not_supported,
        },
    )


class CostMeter:
    """Charges each NVML call what it cost on the recorded H100; `cpu_us` / `wall_us` add up the charges."""

    def __init__(self, path: Path = FIXTURES / "nvml-call-costs.json") -> None:
        table = json.loads(path.read_text())
        self.cpu_per_call: dict[str, float] = {name: float(table["cheap_cpu_us"]) for name in table["cheap"]}
        self.cpu_per_call.update({name: float(us) for name, us in table["cpu_us"].items()})
        self.wall_per_call: dict[str, float] = {name: float(us) for name, us in table["wall_us"].items()}
        self.unlisted_cpu_us = float(table["unlisted_cpu_us"])
        self.unlisted: set[str] = set()  # calls the recording has no figure for (charged unlisted_cpu_us)
        self.cpu_us = 0.0
        self.wall_us = 0.0

    def charge(self, name: str) -> None:
        cpu = self.cpu_per_call.get(name)
        if cpu is None:
            self.unlisted.add(name)
            cpu = self.unlisted_cpu_us
        self.cpu_us += cpu
        self.wall_us += self.wall_per_call.get(name, cpu)


# Calls made once per GPU or per process (start-up, attach) or that only the stub's bookkeeping makes: not
# charged, so that a meter read across rounds measures the rounds.
_SET_UP_CALLS = frozenset(
    {
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlSystemGetDriverVersion",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlEventSetCreate",
        "nvmlDeviceRegisterEvents",
        "nvmlEventSetFree",
        "nvmlGpmSampleAlloc",
        "nvmlGpmSampleFree",
        "nvmlGpmQueryDeviceSupport",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkWidth",
    }
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
        cost: CostMeter | None = None,
    ) -> None:
        self.gpus = gpus
        self.cost = cost
        self.init_error = init_error
        self.driver_version = driver_version
        self.system_errors = system_errors or {}
        self.calls: Counter[str] = Counter()
        self.pending_xids: list[tuple[int, int]] = []  # (gpu index, XID) waiting in the event set
        self.registered: set[int] = set()
        self.event_sets_freed = 0
        self.shutdowns = 0
        self.gpm_samples_freed = 0
        self._gpm_sampled: dict[int, FakeGpu] = {}  # GPM sample address -> the GPU it was taken of

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name, fn in self.functions().items():
            monkeypatch.setattr(pynvml, name, fn)
        return self

    def as_module(self) -> SimpleNamespace:
        """The scripted driver as a stand-in module (`NvmlCollector(host, nvml=...)`), pynvml left alone."""
        return SimpleNamespace(**self.functions())

    def functions(self) -> dict[str, Callable[..., Any]]:
        """Every scripted pynvml function, counted (and charged, with a cost meter), by pynvml name."""
        wrapped = {name: self._counted(name, fn) for name, fn in self._system_functions().items()}
        wrapped.update({name: self._device(name, read) for name, read in self._device_functions().items()})
        wrapped["nvmlGpmSampleGet"] = self._device("nvmlGpmSampleGet", self._gpm_sample)
        return wrapped

    def xid(self, gpu_index: int, xid: int) -> None:
        """The driver reports XID `xid` on GPU `gpu_index` (delivered only if the GPU was registered)."""
        if gpu_index in self.registered:
            self.pending_xids.append((gpu_index, xid))

    # ---- plumbing --------------------------------------------------------------------------------------

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self._charge(name)
            code = self.system_errors.get(name)
            if code is not None:
                raise nvml_error(code)
            return fn(*args)

        return call

    def _device(self, name: str, read: Callable[..., Any]) -> Callable[..., Any]:
        def call(handle: FakeGpu, *args: Any) -> Any:
            self._charge(name)
            if handle.lost:
                raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
            code = handle.errors.get(name)
            if code is not None:
                raise nvml_error(code)
            return read(handle, *args)

        return call

    def _charge(self, name: str) -> None:
        self.calls[name] += 1
        if self.cost is not None and name not in _SET_UP_CALLS:
            self.cost.charge(name)

    def _gpm_metrics(self, request: Any) -> Any:
        """nvmlGpmMetricsGet: each asked metric's value on the GPU both samples were taken of."""
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        first = self._gpm_sampled.get(_address(request.sample1))
        second = self._gpm_sampled.get(_address(request.sample2))
        if first is None or second is None or first is not second:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        answers = first.gpm or {}
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            answer = answers.get(metric.metricId, pynvml.NVML_ERROR_NOT_SUPPORTED)
            if isinstance(answer, int):
                metric.nvmlReturn = answer
            else:
                metric.nvmlReturn = pynvml.NVML_SUCCESS
                metric.value = answer
        return request

    def _gpm_sample(self, gpu: FakeGpu, sample: Any) -> Any:
        if gpu.gpm is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._gpm_sampled[_address(sample)] = gpu
        return sample

    def _gpm_free(self, sample: Any) -> None:
        self.gpm_samples_freed += 1
        self._gpm_sampled.pop(_address(sample), None)

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
            "nvmlGpmSampleAlloc": lambda: pynvml.c_nvmlGpmSample_t(pynvml.struct_c_nvmlGpmSample_t()),
            "nvmlGpmSampleFree": self._gpm_free,
            "nvmlGpmMetricsGet": self._gpm_metrics,
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
            "nvmlDeviceGetViolationStatus": lambda g, policy: SimpleNamespace(
                referenceTime=1_700_000_000_000_000,
                violationTime={
                    pynvml.NVML_PERF_POLICY_POWER: g.violation_power_ns,
                    pynvml.NVML_PERF_POLICY_THERMAL: g.violation_thermal_ns,
                }[policy],
            ),
            "nvmlDeviceGetComputeRunningProcesses": lambda g: [
                SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in g.compute_pids
            ],
            "nvmlGpmQueryDeviceSupport": lambda g: SimpleNamespace(
                version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(g.gpm is not None)
            ),
        }


def _address(sample: Any) -> int:
    return int(ctypes.cast(sample, ctypes.c_void_p).value or 0)
