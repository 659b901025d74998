"""One GPU through NVML, as a `collectors.gpu_device.GpuDevice`: which pynvml call answers which field.

Identity (UUID, name, serial, PCI bus id, maximum PCIe link) and the set of NVLink links are read once, when
the device is opened; every query goes through `DeviceQueries`, so a field the GPU lacks is asked once and a
lost GPU raises GpuLost.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import pynvml

from collectors.gpu_device import FastReading, GpmReading, GpuIdentity, SlowReading
from collectors.kmsg_classify import normalise_pci_bus_id
from collectors.nvml_gpm import GpmSampler
from collectors.nvml_query import DeviceQueries, GpuLost, NvmlApi, error_reason, error_text

_PSTATE_UNKNOWN: Final = pynvml.NVML_PSTATE_UNKNOWN
_LINK_ACTIVE: Final = pynvml.NVML_FEATURE_ENABLED
_NVLINK_COUNTERS: Final = (
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
)
_CORRECTED: Final = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
_UNCORRECTED: Final = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_VOLATILE: Final = pynvml.NVML_VOLATILE_ECC
_AGGREGATE: Final = pynvml.NVML_AGGREGATE_ECC
_NS: Final = 1e9
_KIB: Final = 1024.0

# (link, state query key, error-counter query keys) of one NVLink link, precomputed once.
NvLink = tuple[int, tuple[str, int], tuple[tuple[str, int, int], ...]]


def text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


class NvmlGpuDevice:
    """An attached GPU. `open` raises GpuLost or NVMLError when it does not answer."""

    def __init__(
        self,
        api: NvmlApi,
        queries: DeviceQueries,
        identity: GpuIdentity,
        nvlinks: tuple[NvLink, ...],
        gpm: GpmSampler | None,
    ) -> None:
        self._api = api
        self._q = queries
        self._identity = identity
        self._nvlinks = nvlinks
        self._gpm = gpm

    @classmethod
    def open(
        cls,
        api: NvmlApi,
        handle: Any,
        index: int,
        problems: Counter[str],
        driver_version: str | None,
        previous_uuid: str = "",
    ) -> NvmlGpuDevice:
        queries = DeviceQueries(handle, problems, api.memory_info)
        queries.probe()  # a GPU that does not answer is not attached
        identity = _read_identity(api, queries, index, driver_version, previous_uuid)
        nvlinks = _discover_nvlinks(api, queries, problems)
        return cls(api, queries, identity, nvlinks, GpmSampler.open(api, queries, problems))

    @property
    def identity(self) -> GpuIdentity:
        return self._identity

    @property
    def handle(self) -> Any:
        return self._q.handle

    @property
    def has_gpm(self) -> bool:
        return self._gpm is not None

    def close(self) -> None:
        if self._gpm is not None:
            self._gpm.close()
            self._gpm = None

    # ---- GpuDevice -------------------------------------------------------------------------------------

    def read_fast(self) -> FastReading:
        q, api = self._q, self._api
        get = q.get
        memory = q.probe()  # first, so that a lost GPU costs one call
        utilization = get("utilization", api.utilization)
        power_mw = get("power_watts", api.power_usage)
        temperature = get("temperature_celsius", api.temperature, pynvml.NVML_TEMPERATURE_GPU)
        pstate = get("performance_state", api.performance_state)
        pages_pending = get("retired_pages_pending", api.retired_pages_pending)
        remapped = get("remapped_rows", api.remapped_rows)
        sbe, dbe = self._retired_pages()
        return FastReading(
            utilization_gpu_percent=None if utilization is None else float(utilization.gpu),
            utilization_memory_percent=None if utilization is None else float(utilization.memory),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            temperature_celsius=None if temperature is None else float(temperature),
            power_watts=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=get("sm_clock_mhz", api.clock_info, pynvml.NVML_CLOCK_SM),
            memory_clock_mhz=get("memory_clock_mhz", api.clock_info, pynvml.NVML_CLOCK_MEM),
            performance_state=None if pstate is None or pstate == _PSTATE_UNKNOWN else int(pstate),
            clocks_event_reasons=self._clocks_event_reasons(),
            ecc_corrected_volatile=get("ecc_corrected_volatile", api.total_ecc_errors, _CORRECTED, _VOLATILE),
            ecc_uncorrected_volatile=get(
                "ecc_uncorrected_volatile", api.total_ecc_errors, _UNCORRECTED, _VOLATILE
            ),
            ecc_corrected_aggregate=get(
                "ecc_corrected_aggregate", api.total_ecc_errors, _CORRECTED, _AGGREGATE
            ),
            ecc_uncorrected_aggregate=get(
                "ecc_uncorrected_aggregate", api.total_ecc_errors, _UNCORRECTED, _AGGREGATE
            ),
            retired_pages_sbe=sbe,
            retired_pages_dbe=dbe,
            retired_pages_pending=None
            if pages_pending is None
            else pages_pending == pynvml.NVML_FEATURE_ENABLED,
            remapped_rows_corrected=None if remapped is None else int(remapped[0]),
            remapped_rows_uncorrected=None if remapped is None else int(remapped[1]),
            remapped_rows_pending=None if remapped is None else bool(remapped[2]),
            remapped_rows_failure=None if remapped is None else bool(remapped[3]),
        )

    def read_slow(self, *, pcie_throughput: bool) -> SlowReading:
        get, api = self._q.get, self._api
        tx_kib = rx_kib = None
        if pcie_throughput:
            tx_kib = get("pcie_tx_bytes_per_second", api.pcie_throughput, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            rx_kib = get("pcie_rx_bytes_per_second", api.pcie_throughput, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        active, errors = self._nvlink()
        return SlowReading(
            pcie_replay_errors=get("pcie_replay_errors", api.pcie_replay_counter),
            pcie_link_gen=get("pcie_link_gen", api.pcie_link_gen),
            pcie_link_width=get("pcie_link_width", api.pcie_link_width),
            pcie_tx_bytes_per_second=None if tx_kib is None else tx_kib * _KIB,
            pcie_rx_bytes_per_second=None if rx_kib is None else rx_kib * _KIB,
            violation_power_seconds=self._violation_seconds("violation_power", pynvml.NVML_PERF_POLICY_POWER),
            violation_thermal_seconds=self._violation_seconds(
                "violation_thermal", pynvml.NVML_PERF_POLICY_THERMAL
            ),
            nvlink_links_active=active,
            nvlink_crc_flit_errors=errors[0],
            nvlink_crc_data_errors=errors[1],
            nvlink_replay_errors=errors[2],
            nvlink_recovery_errors=errors[3],
        )

    def read_energy_joules(self) -> float | None:
        energy_mj = self._q.get("energy_joules", self._api.total_energy)
        return None if energy_mj is None else energy_mj / 1000.0

    def read_gpm(self) -> GpmReading | None:
        return None if self._gpm is None else self._gpm.read()

    def compute_pids(self) -> tuple[int, ...] | None:
        processes = self._q.get("compute_processes", self._api.compute_processes)
        if processes is None:
            return None
        pids = []
        for process in processes:
            pid = getattr(process, "pid", None)
            if isinstance(pid, int) and 0 < pid < 2**31:
                pids.append(pid)
        return tuple(sorted(set(pids)))

    # ---- helpers ---------------------------------------------------------------------------------------

    def _clocks_event_reasons(self) -> int | None:
        q, api = self._q, self._api
        reasons: int | None = q.get("clocks_event_reasons", api.clocks_event_reasons)
        if (
            reasons is None
            and q.unsupported_code("clocks_event_reasons") == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
        ):
            reasons = q.get("clocks_throttle_reasons", api.clocks_throttle_reasons)
        return reasons

    def _retired_pages(self) -> tuple[int | None, int | None]:
        get, api = self._q.get, self._api
        sbe = get(
            "retired_pages_sbe",
            api.retired_pages,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        )
        dbe = get(
            "retired_pages_dbe", api.retired_pages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        )
        return (None if sbe is None else len(sbe)), (None if dbe is None else len(dbe))

    def _violation_seconds(self, key: str, policy: int) -> float | None:
        status = self._q.get(key, self._api.violation_status, policy)
        nanoseconds = getattr(status, "violationTime", None)
        if not isinstance(nanoseconds, int) or nanoseconds < 0:
            return None
        return nanoseconds / _NS

    def _nvlink(self) -> tuple[int | None, list[int | None]]:
        """Active link count and each error counter summed over active links (None: no link answered)."""
        sums: list[int | None] = [None, None, None, None]
        if not self._nvlinks:
            return None, sums
        get = self._q.get
        state_fn = self._api.nvlink_state
        counter_fn = self._api.nvlink_error_counter
        active = 0
        for link, state_key, counter_keys in self._nvlinks:
            if get(state_key, state_fn, link) != _LINK_ACTIVE:
                continue
            active += 1
            for slot, (key, counter) in enumerate(zip(counter_keys, _NVLINK_COUNTERS, strict=True)):
                value = get(key, counter_fn, link, counter)
                if value is not None:
                    total = sums[slot]
                    sums[slot] = value if total is None else total + value
        return active, sums


def _read_identity(
    api: NvmlApi, q: DeviceQueries, index: int, driver_version: str | None, previous_uuid: str
) -> GpuIdentity:
    pci = q.get("pci_bus_id", api.pci_info)
    bus_id = text(getattr(pci, "busId", None)) if pci is not None else None
    return GpuIdentity(
        index=index,
        uuid=text(q.get("uuid", api.uuid)) or previous_uuid,
        name=text(q.get("name", api.name)),
        serial=text(q.get("serial", api.serial)),
        pci_bus_id=normalise_pci_bus_id(bus_id) if bus_id else None,
        driver_version=driver_version,
        pcie_link_gen_max=q.get("pcie_link_gen_max", api.pcie_link_gen_max),
        pcie_link_width_max=q.get("pcie_link_width_max", api.pcie_link_width_max),
    )


def _discover_nvlinks(api: NvmlApi, q: DeviceQueries, problems: Counter[str]) -> tuple[NvLink, ...]:
    """Links 0..NVML_NVLINK_MAX_LINKS-1 whose state NVML reports; stops at INVALID_ARGUMENT (no such link on
    this GPU) and skips NOT_SUPPORTED ones. Each link carries its precomputed query keys."""
    links: list[NvLink] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            api.nvlink_state(q.handle, link)
        except pynvml.NVMLError as exc:
            code = getattr(exc, "value", -1)
            if code in (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED):
                raise GpuLost(code, error_text(exc)) from None
            if code in (pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                break
            if code != pynvml.NVML_ERROR_NOT_SUPPORTED:
                problems[f"nvlink_{error_reason(code)}"] += 1
            continue
        except Exception:
            problems["binding_error"] += 1
            break
        counters = tuple(("nvlink_error", link, counter) for counter in _NVLINK_COUNTERS)
        links.append((link, ("nvlink_state", link), counters))
    return tuple(links)
