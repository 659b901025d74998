"""NVML collector: one GpuSample per GPU per round, XID events from an NVML event set, GPU_LOST on loss.

Costs are kept per round (target < 5 ms CPU for 8 GPUs): identity (UUID, name, serial, PCI bus id, driver,
maximum PCIe link) and the set of NVLink links are read once; a field a GPU does not support is not asked
again (`collectors.nvml_query`); NVLink error counters are read only for active links.

nvmlDeviceGetPcieThroughput measures over a 20 ms window inside the driver, so each call takes ~20 ms of
wall time (sleeping, not CPU): 2 calls x 8 GPUs = ~320 ms per round. `read_pcie_throughput=False` skips it.

A GPU that answered before and now reports GPU_IS_LOST / RESET_REQUIRED (or UNKNOWN on the liveness probe)
yields one GPU_LOST event (Event.code = the NVML return code) and is skipped while the other GPUs are
sampled; every `lost_retry_seconds` it is looked up again by UUID and sampled again once it answers.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pynvml

from collectors.event_dedup import DEFAULT_WINDOW_SECONDS, fold_burst
from collectors.kmsg_classify import normalise_pci_bus_id
from collectors.nvml_query import DeviceQueries, GpuLost, NvmlApi, error_reason, error_text
from collectors.protocol import CollectorUnavailable
from fleetguard.records.telemetry import Batch, Event, EventKind, GpuSample

log = logging.getLogger(__name__)

SOURCE: Final = "nvml"
_KIB: Final = 1024
_PSTATE_UNKNOWN: Final = pynvml.NVML_PSTATE_UNKNOWN
_XID_EVENT: Final = pynvml.nvmlEventTypeXidCriticalError
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

_INIT_ADVICE: Final = "use --no-nvml or --simulate"


def init_failure_message(error: BaseException) -> str:
    """One sentence for an operator on why nvmlInit failed and what to do."""
    code = getattr(error, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return (
            "NVIDIA driver not found (libnvidia-ml.so.1 missing): this host has no usable NVIDIA GPU; "
            + _INIT_ADVICE
        )
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return (
            "NVIDIA kernel driver is not loaded (nvmlInit: Driver Not Loaded): load it (modprobe nvidia) or "
            + _INIT_ADVICE
        )
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return (
            "no permission to use NVML (nvmlInit: Insufficient Permissions): run the agent as a user that "
            "can open /dev/nvidia*, or " + _INIT_ADVICE
        )
    if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return (
            "NVML library and kernel driver versions differ (driver upgraded without reboot): reboot or "
            "reload the nvidia modules, or " + _INIT_ADVICE
        )
    detail = error_text(error) if isinstance(error, pynvml.NVMLError) else f"{type(error).__name__}: {error}"
    return f"NVML could not start ({detail}): " + _INIT_ADVICE


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


@dataclass(slots=True)
class _Gpu:
    """What the collector knows about one GPU: identity read once, the links it has, whether it is lost."""

    index: int
    queries: DeviceQueries | None = None  # None until the GPU has answered once
    uuid: str = ""
    name: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width_max: int | None = None
    # (link, state key, error-counter keys) for every link the GPU has; empty without NVLink.
    nvlinks: tuple[tuple[int, tuple[str, int], tuple[tuple[str, int, int], ...]], ...] = ()
    lost: bool = False
    retry_at: float = float("-inf")
    xid_registered: bool = False


class NvmlCollector:
    """Samples every GPU NVML sees. Raises CollectorUnavailable (one sentence) when NVML cannot start.

    ``xid_events=False`` creates no event set: no XID events at all. The driver writes every XID to the kernel
    log as well, so where the kernel-log collector runs it reports them and NVML must not report them a second
    time (`fleetguard.agent.sources` decides).
    """

    name = "nvml"

    def __init__(
        self,
        host: str,
        *,
        nvml: Any = None,
        read_pcie_throughput: bool = True,
        lost_retry_seconds: float = 30.0,
        max_xid_events_per_collect: int = 10_000,
        xid_fold_window_seconds: float | None = DEFAULT_WINDOW_SECONDS,
        xid_events: bool = True,
    ) -> None:
        self.host = host
        self.xid_events = xid_events
        self.read_pcie_throughput = read_pcie_throughput
        self.lost_retry_seconds = lost_retry_seconds
        self.max_xid_events_per_collect = max_xid_events_per_collect
        self.xid_fold_window_seconds = xid_fold_window_seconds
        self._api = NvmlApi.from_module(pynvml if nvml is None else nvml)
        self._problems: Counter[str] = Counter()
        self._closed = False
        try:
            self._api.init()
        except Exception as exc:
            raise CollectorUnavailable(init_failure_message(exc)) from None
        try:
            count = int(self._api.device_count())
        except Exception as exc:
            self._shutdown()
            raise CollectorUnavailable(
                f"NVML started but cannot count GPUs ({error_text(exc)}): " + _INIT_ADVICE
            ) from None
        if count <= 0:
            self._shutdown()
            raise CollectorUnavailable("NVML started but sees no GPU on this host: " + _INIT_ADVICE)
        self.driver_version = self._system_text(self._api.driver_version)
        self._gpus = [_Gpu(index) for index in range(count)]
        self._event_set = self._create_event_set() if xid_events else None
        for gpu in self._gpus:
            if not self._attach(gpu):
                self._problems["gpu_unreachable_at_start"] += 1

    # ---- Collector protocol ----------------------------------------------------------------------------

    @property
    def gpu_indices(self) -> list[int]:
        """NVML index of every GPU this collector samples (including ones lost or not yet answering)."""
        return [gpu.index for gpu in self._gpus]

    def collect(self, now: float) -> Batch:
        batch = Batch()
        if self._closed:
            return batch
        for gpu in self._gpus:
            if gpu.queries is None or gpu.lost:
                if now < gpu.retry_at:
                    continue
                gpu.retry_at = now + self.lost_retry_seconds
                if not self._attach(gpu):
                    continue
            try:
                batch.gpu_samples.append(self._sample(gpu, now))
            except GpuLost as lost:
                self._mark_lost(gpu, lost, now, batch)
            except Exception:  # a bug here must cost one GPU for one round, not the agent
                log.exception("NVML sampling of GPU %d failed", gpu.index)
                self._problems["collector_error"] += 1
        self._drain_xids(now, batch)
        return batch

    def problems(self) -> Mapping[str, int]:
        return dict(self._problems)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._event_set is not None:
            try:
                self._api.event_set_free(self._event_set)
            except Exception:
                self._problems["event_set_free_failed"] += 1
            self._event_set = None
        self._shutdown()

    # ---- GPUs ------------------------------------------------------------------------------------------

    def _attach(self, gpu: _Gpu) -> bool:
        """Get a handle (by UUID once known: indices can shift after a GPU drops out), check the GPU answers,
        read its identity and links, register it for XID events. False when it does not answer."""
        api = self._api
        try:
            handle = api.handle_by_uuid(gpu.uuid) if gpu.uuid else api.handle_by_index(gpu.index)
            queries = DeviceQueries(handle, self._problems, api.memory_info)
            queries.probe()
            self._read_identity(gpu, queries)
        except GpuLost:
            return False
        except Exception:  # handle lookups raise NVMLError directly (not through DeviceQueries)
            return False
        gpu.queries = queries
        gpu.lost = False
        if not gpu.xid_registered:
            self._register_xid(gpu)
        return True

    def _read_identity(self, gpu: _Gpu, q: DeviceQueries) -> None:
        api = self._api
        gpu.uuid = _text(q.get("uuid", api.uuid)) or gpu.uuid
        gpu.name = _text(q.get("name", api.name))
        gpu.serial = _text(q.get("serial", api.serial))
        pci = q.get("pci_bus_id", api.pci_info)
        bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
        gpu.pci_bus_id = normalise_pci_bus_id(bus_id) if bus_id else None
        gpu.pcie_link_gen_max = q.get("pcie_link_gen_max", api.pcie_link_gen_max)
        gpu.pcie_link_width_max = q.get("pcie_link_width_max", api.pcie_link_width_max)
        gpu.nvlinks = self._discover_nvlinks(q)

    def _discover_nvlinks(
        self, q: DeviceQueries
    ) -> tuple[tuple[int, tuple[str, int], tuple[tuple[str, int, int], ...]], ...]:
        """Links 0..NVML_NVLINK_MAX_LINKS-1 whose state NVML reports; stops at INVALID_ARGUMENT (no such
        link on this GPU) and skips NOT_SUPPORTED ones. Each link carries its precomputed query keys."""
        links = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                self._api.nvlink_state(q.handle, link)
            except pynvml.NVMLError as exc:
                code = getattr(exc, "value", -1)
                if code in (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED):
                    raise GpuLost(code, error_text(exc)) from None
                if code in (pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                    break
                if code != pynvml.NVML_ERROR_NOT_SUPPORTED:
                    self._problems[f"nvlink_{error_reason(code)}"] += 1
                continue
            except Exception:
                self._problems["binding_error"] += 1
                break
            links.append(
                (
                    link,
                    ("nvlink_state", link),
                    tuple(("nvlink_error", link, counter) for counter in _NVLINK_COUNTERS),
                )
            )
        return tuple(links)

    def _sample(self, gpu: _Gpu, now: float) -> GpuSample:
        q = gpu.queries
        assert q is not None
        api = self._api
        get = q.get
        memory = q.probe()  # first, so that a lost GPU costs one call
        utilization = get("utilization", api.utilization)
        power_mw = get("power_watts", api.power_usage)
        energy_mj = get("energy_joules", api.total_energy)
        temperature = get("temperature_celsius", api.temperature, pynvml.NVML_TEMPERATURE_GPU)
        pstate = get("performance_state", api.performance_state)
        reasons = get("clocks_event_reasons", api.clocks_event_reasons)
        if (
            reasons is None
            and q.unsupported_code("clocks_event_reasons") == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
        ):
            reasons = get("clocks_throttle_reasons", api.clocks_throttle_reasons)
        sbe_pages = get(
            "retired_pages_sbe",
            api.retired_pages,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        )
        dbe_pages = get(
            "retired_pages_dbe", api.retired_pages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        )
        pages_pending = get("retired_pages_pending", api.retired_pages_pending)
        remapped = get("remapped_rows", api.remapped_rows)
        tx_kib = rx_kib = None
        if self.read_pcie_throughput:
            tx_kib = get("pcie_tx_bytes_per_second", api.pcie_throughput, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            rx_kib = get("pcie_rx_bytes_per_second", api.pcie_throughput, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        nvlink_active, nvlink_errors = self._nvlink(gpu, q)
        return GpuSample(
            ts=now,
            host=self.host,
            gpu_index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            serial=gpu.serial,
            pci_bus_id=gpu.pci_bus_id,
            driver_version=self.driver_version,
            utilization_gpu_percent=None if utilization is None else float(utilization.gpu),
            utilization_memory_percent=None if utilization is None else float(utilization.memory),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            temperature_celsius=None if temperature is None else float(temperature),
            power_watts=None if power_mw is None else power_mw / 1000.0,
            energy_joules=None if energy_mj is None else energy_mj / 1000.0,
            sm_clock_mhz=get("sm_clock_mhz", api.clock_info, pynvml.NVML_CLOCK_SM),
            memory_clock_mhz=get("memory_clock_mhz", api.clock_info, pynvml.NVML_CLOCK_MEM),
            performance_state=None if pstate is None or pstate == _PSTATE_UNKNOWN else int(pstate),
            clocks_event_reasons=reasons,
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
            retired_pages_sbe=None if sbe_pages is None else len(sbe_pages),
            retired_pages_dbe=None if dbe_pages is None else len(dbe_pages),
            retired_pages_pending=None
            if pages_pending is None
            else pages_pending == pynvml.NVML_FEATURE_ENABLED,
            remapped_rows_corrected=None if remapped is None else int(remapped[0]),
            remapped_rows_uncorrected=None if remapped is None else int(remapped[1]),
            remapped_rows_pending=None if remapped is None else bool(remapped[2]),
            remapped_rows_failure=None if remapped is None else bool(remapped[3]),
            pcie_replay_errors=get("pcie_replay_errors", api.pcie_replay_counter),
            pcie_tx_bytes_per_second=None if tx_kib is None else float(tx_kib * _KIB),
            pcie_rx_bytes_per_second=None if rx_kib is None else float(rx_kib * _KIB),
            pcie_link_gen=get("pcie_link_gen", api.pcie_link_gen),
            pcie_link_gen_max=gpu.pcie_link_gen_max,
            pcie_link_width=get("pcie_link_width", api.pcie_link_width),
            pcie_link_width_max=gpu.pcie_link_width_max,
            nvlink_links_active=nvlink_active,
            nvlink_crc_flit_errors=nvlink_errors[0],
            nvlink_crc_data_errors=nvlink_errors[1],
            nvlink_replay_errors=nvlink_errors[2],
            nvlink_recovery_errors=nvlink_errors[3],
        )

    def _nvlink(self, gpu: _Gpu, q: DeviceQueries) -> tuple[int | None, list[int | None]]:
        """Active link count and each error counter summed over active links (None: no link answered)."""
        sums: list[int | None] = [None, None, None, None]
        if not gpu.nvlinks:
            return None, sums
        get = q.get
        state_fn = self._api.nvlink_state
        counter_fn = self._api.nvlink_error_counter
        active = 0
        for link, state_key, counter_keys in gpu.nvlinks:
            if get(state_key, state_fn, link) != _LINK_ACTIVE:
                continue
            active += 1
            for slot, (key, counter) in enumerate(zip(counter_keys, _NVLINK_COUNTERS, strict=True)):
                value = get(key, counter_fn, link, counter)
                if value is not None:
                    total = sums[slot]
                    sums[slot] = value if total is None else total + value
        return active, sums

    def _mark_lost(self, gpu: _Gpu, lost: GpuLost, now: float, batch: Batch) -> None:
        gpu.retry_at = now + self.lost_retry_seconds
        if gpu.lost:
            return
        gpu.lost = True
        self._problems["gpu_lost"] += 1
        batch.events.append(
            Event(
                ts=now,
                host=self.host,
                kind=EventKind.GPU_LOST.value,
                source=SOURCE,
                message=f"NVML: GPU {gpu.index} ({gpu.pci_bus_id or 'unknown bus'}, {gpu.uuid}) is lost: "
                f"{lost.detail}",
                code=lost.code,
                pci_bus_id=gpu.pci_bus_id,
                gpu_index=gpu.index,
            )
        )

    # ---- XID events ------------------------------------------------------------------------------------

    def _create_event_set(self) -> Any:
        try:
            return self._api.event_set_create()
        except Exception as exc:
            self._problems[f"xid_event_set_{_reason(exc)}"] += 1
            return None

    def _register_xid(self, gpu: _Gpu) -> None:
        if self._event_set is None or gpu.queries is None:
            return
        try:
            self._api.register_events(gpu.queries.handle, _XID_EVENT, self._event_set)
        except Exception as exc:  # e.g. NOT_SUPPORTED on some GPUs: no NVML XIDs for it, kmsg still has them
            self._problems[f"xid_register_{_reason(exc)}"] += 1
            return
        gpu.xid_registered = True

    def _drain_xids(self, now: float, batch: Batch) -> None:
        if self._event_set is None:
            return
        events: list[Event] = []
        for _ in range(self.max_xid_events_per_collect):
            try:
                data = self._api.event_set_wait(self._event_set, 0)
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) != pynvml.NVML_ERROR_TIMEOUT:
                    self._problems[f"xid_wait_{_reason(exc)}"] += 1
                break
            except Exception:
                self._problems["xid_wait_binding_error"] += 1
                break
            if not int(getattr(data, "eventType", _XID_EVENT)) & _XID_EVENT:
                continue
            events.append(self._xid_event(data, now))
        else:
            self._problems["xid_backlog_left"] += 1  # the rest waits for the next round
        if self.xid_fold_window_seconds is not None:
            events = fold_burst(events, self.xid_fold_window_seconds)
        batch.events.extend(events)

    def _xid_event(self, data: Any, now: float) -> Event:
        xid = int(data.eventData)
        gpu = self._gpu_of(data.device)
        where = f"GPU {gpu.index} ({gpu.pci_bus_id or 'unknown bus'})" if gpu else "an unknown GPU"
        return Event(
            ts=now,
            host=self.host,
            kind=EventKind.XID.value,
            source=SOURCE,
            message=f"NVML: Xid {xid} on {where}",
            code=xid,
            pci_bus_id=gpu.pci_bus_id if gpu else None,
            gpu_index=gpu.index if gpu else None,
        )

    def _gpu_of(self, handle: Any) -> _Gpu | None:
        try:
            index = int(self._api.device_index(handle))
        except Exception:
            self._problems["xid_device_unknown"] += 1
            return None
        if 0 <= index < len(self._gpus):
            return self._gpus[index]
        self._problems["xid_device_unknown"] += 1
        return None

    # ---- library ---------------------------------------------------------------------------------------

    def _system_text(self, fn: Any) -> str | None:
        try:
            return _text(fn())
        except Exception as exc:
            self._problems[_reason(exc)] += 1
            return None

    def _shutdown(self) -> None:
        try:
            self._api.shutdown()
        except Exception:
            self._problems["shutdown_failed"] += 1


def _reason(error: BaseException) -> str:
    code = getattr(error, "value", None)
    return (
        error_reason(code)
        if isinstance(error, pynvml.NVMLError) and isinstance(code, int)
        else "binding_error"
    )
