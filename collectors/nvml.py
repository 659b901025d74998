"""NVML collector: one GpuSample per GPU per round, XID events from an NVML event set, GPU_LOST on loss.

What is read how often is `collectors.gpu_sampling`'s business (cheap fields every round, expensive ones
every slow interval, energy integrated from power in between); how each field is read is
`collectors.nvml_device`'s. This module owns the GPUs' life: attaching, losing and finding them again, the
XID event set, and the compute processes seen on each GPU.

A GPU that answered before and now reports GPU_IS_LOST / RESET_REQUIRED (or UNKNOWN on the liveness probe)
yields one GPU_LOST event (Event.code = the NVML return code) and is skipped while the other GPUs are
sampled; every `lost_retry_seconds` it is looked up again by UUID and sampled again once it answers.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import pynvml

from collectors.event_dedup import DEFAULT_WINDOW_SECONDS, fold_burst
from collectors.gpu_device import GpuProcesses
from collectors.gpu_sampling import GpuSampler, SamplingPlan
from collectors.nvml_device import NvmlGpuDevice, text
from collectors.nvml_query import GpuLost, NvmlApi, error_reason, error_text
from collectors.protocol import CollectorUnavailable
from fleetguard.records.telemetry import Batch, Event, EventKind

log = logging.getLogger(__name__)

SOURCE: Final = "nvml"
_XID_EVENT: Final = pynvml.nvmlEventTypeXidCriticalError

# The key, not a flag: the commands that read NVML share no flag (scan and collect have --no-nvml, selfcheck
# --gpus none, up and agent --simulate); each command adds its own flag where it prints this.
_INIT_ADVICE: Final = "on a host without GPUs set collectors.nvml = false"


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


@runtime_checkable
class StoppableLog(Protocol):
    """The kernel-log collector as the XID hand-over sees it (collectors.kmsg.KmsgCollector)."""

    @property
    def stopped(self) -> bool: ...


@dataclass(slots=True)
class _Gpu:
    """What the collector knows of one GPU: its device once it answered, its cadence, whether it is lost."""

    index: int
    sampler: GpuSampler
    device: NvmlGpuDevice | None = None  # None until the GPU has answered once
    uuid: str = ""
    pci_bus_id: str | None = None
    lost: bool = False
    retry_at: float = float("-inf")
    xid_registered: bool = False
    pids: tuple[int, ...] | None = None  # compute processes at the last round


class NvmlCollector:
    """Samples every GPU NVML sees. Raises CollectorUnavailable (one sentence) when NVML cannot start.

    ``xid_events=False`` creates no event set at start: the driver writes every XID to the kernel log as well,
    so where the kernel-log collector runs it reports them and NVML must not report them a second time
    (`fleetguard.agent.sources` decides). `start_xid_events()` creates it later, when that collector stops.
    ``plan`` is the cadence of the expensive fields (`collectors.gpu_sampling`).
    """

    name = "nvml"

    def __init__(
        self,
        host: str,
        *,
        nvml: Any = None,
        plan: SamplingPlan | None = None,
        lost_retry_seconds: float = 30.0,
        max_xid_events_per_collect: int = 10_000,
        xid_fold_window_seconds: float | None = DEFAULT_WINDOW_SECONDS,
        xid_events: bool = True,
    ) -> None:
        self.host = host
        self.plan = plan or SamplingPlan()
        self.lost_retry_seconds = lost_retry_seconds
        self.max_xid_events_per_collect = max_xid_events_per_collect
        self.xid_fold_window_seconds = xid_fold_window_seconds
        self._api = NvmlApi.from_module(pynvml if nvml is None else nvml)
        self._problems: Counter[str] = Counter()
        self._closed = False
        self._event_set: Any = None
        self._kernel_log: StoppableLog | None = None
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
        self._gpus = [_Gpu(index, GpuSampler(self.plan, index / count)) for index in range(count)]
        if xid_events:
            self.start_xid_events()
        for gpu in self._gpus:
            if not self._attach(gpu):
                self._problems["gpu_unreachable_at_start"] += 1
        self.notes = _gpm_notes(self._gpus)
        for note in self.notes:
            log.info("%s", note)

    # ---- Collector protocol ----------------------------------------------------------------------------

    @property
    def gpu_indices(self) -> list[int]:
        """NVML index of every GPU this collector samples (including ones lost or not yet answering)."""
        return [gpu.index for gpu in self._gpus]

    @property
    def xid_events(self) -> bool:
        """XID events are being read from an NVML event set."""
        return self._event_set is not None

    def collect(self, now: float) -> Batch:
        batch = Batch()
        if self._closed:
            return batch
        for gpu in self._gpus:
            if gpu.device is None or gpu.lost:
                if now < gpu.retry_at:
                    continue
                gpu.retry_at = now + self.lost_retry_seconds
                if not self._attach(gpu):
                    continue
            assert gpu.device is not None
            try:
                batch.gpu_samples.append(gpu.sampler.sample(gpu.device, self.host, now))
                gpu.pids = gpu.device.compute_pids()
            except GpuLost as lost:
                self._mark_lost(gpu, lost, now, batch)
            except Exception:  # a bug here must cost one GPU for one round, not the agent
                log.exception("NVML sampling of GPU %d failed", gpu.index)
                self._problems["collector_error"] += 1
        self._take_over_xids_if_log_stopped()
        self._drain_xids(now, batch)
        return batch

    def problems(self) -> Mapping[str, int]:
        return dict(self._problems)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for gpu in self._gpus:
            if gpu.device is not None:
                gpu.device.close()
        if self._event_set is not None:
            try:
                self._api.event_set_free(self._event_set)
            except Exception:
                self._problems["event_set_free_failed"] += 1
            self._event_set = None
        self._shutdown()

    # ---- GPU processes ---------------------------------------------------------------------------------

    def gpu_processes(self) -> list[GpuProcesses]:
        """The compute processes on each GPU at the last round (GPUs whose processes could be read)."""
        return [
            GpuProcesses(gpu.device.identity.uuid, gpu.index, gpu.pci_bus_id, gpu.pids)
            for gpu in self._gpus
            if gpu.device is not None and not gpu.lost and gpu.pids is not None
        ]

    # ---- GPUs ------------------------------------------------------------------------------------------

    def _attach(self, gpu: _Gpu) -> bool:
        """Open the GPU (by UUID once known: indices can shift after a GPU drops out), reading its identity
        and links, and register it for XID events. False when it does not answer."""
        api = self._api
        try:
            handle = api.handle_by_uuid(gpu.uuid) if gpu.uuid else api.handle_by_index(gpu.index)
            device = NvmlGpuDevice.open(
                api, handle, gpu.index, self._problems, self.driver_version, previous_uuid=gpu.uuid
            )
        except Exception:  # GpuLost, or NVMLError from a handle lookup (not through DeviceQueries)
            return False
        if gpu.device is not None:
            gpu.device.close()
        gpu.device = device
        gpu.uuid = device.identity.uuid
        gpu.pci_bus_id = device.identity.pci_bus_id
        gpu.lost = False
        if not gpu.xid_registered:
            self._register_xid(gpu)
        return True

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
                kind=EventKind.GPU_LOST,
                source=SOURCE,
                message=f"NVML: GPU {gpu.index} ({gpu.pci_bus_id or 'unknown bus'}, {gpu.uuid}) is lost: "
                f"{lost.detail}",
                code=lost.code,
                pci_bus_id=gpu.pci_bus_id,
                gpu_index=gpu.index,
            )
        )

    # ---- XID events ------------------------------------------------------------------------------------

    def start_xid_events(self) -> bool:
        """Read XIDs from an NVML event set from now on (every attached GPU registered); False if NVML cannot.

        Called at start where no kernel log is read, or later when the kernel-log collector stops: NVML then
        reports XIDs from the moment of the call (an event set holds no history)."""
        if self._event_set is not None or self._closed:
            return self._event_set is not None
        try:
            self._event_set = self._api.event_set_create()
        except Exception as exc:
            self._problems[f"xid_event_set_{_reason(exc)}"] += 1
            return False
        for gpu in self._gpus:
            if gpu.device is not None and not gpu.xid_registered:
                self._register_xid(gpu)
        return True

    def take_over_xids_if_stopped(self, kernel_log: StoppableLog) -> None:
        """`kernel_log` reports XIDs while it runs; from the round after it is given up mid-run (`stopped`),
        NVML's event set does. Each XID is reported by one source only: the event set holds no history, and
        a stopped log reads nothing more. XIDs between the log's last read and the switch are not seen."""
        self._kernel_log = kernel_log

    def _take_over_xids_if_log_stopped(self) -> None:
        kernel_log = self._kernel_log
        if kernel_log is None or not kernel_log.stopped:
            return
        self._kernel_log = None
        if self.start_xid_events():
            note = (
                "the kernel log stopped: XIDs come from NVML's event set from now on (no pid or process name)"
            )
        else:
            note = "the kernel log stopped and NVML cannot deliver XID events: XIDs are not reported"
        self.notes.append(note)
        log.warning("%s", note)

    def _register_xid(self, gpu: _Gpu) -> None:
        if self._event_set is None or gpu.device is None:
            return
        try:
            self._api.register_events(gpu.device.handle, _XID_EVENT, self._event_set)
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
            kind=EventKind.XID,
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
            return text(fn())
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


def _gpm_notes(gpus: list[_Gpu]) -> list[str]:
    """One start-up note naming the GPUs without GPM profiling metrics (none where every GPU has them)."""
    without = [
        f"{gpu.index} ({gpu.device.identity.name or 'unknown'})"
        for gpu in gpus
        if gpu.device is not None and not gpu.device.has_gpm
    ]
    if not without:
        return []
    return [
        f"GPM profiling metrics (SM occupancy, tensor activity, DRAM bandwidth) are not offered by GPU "
        f"{', '.join(without)}: Hopper or later with a recent driver has them; those columns stay empty"
    ]
