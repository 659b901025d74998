"""GPM profiling metrics through NVML (Hopper and later): SM activity and occupancy, tensor activity, DRAM
bandwidth, PCIe and NVLink bandwidth, without DCGM.

GPM works on pairs of samples: each round takes one (nvmlGpmSampleGet, ~40 µs on H100) and asks
nvmlGpmMetricsGet for the metrics over the interval since the previous one. Two samples are allocated per GPU
and reused, alternating. A metric the GPU does not offer (NVLink on a GPU without active links, say) answers
its own return code: it reads as None and is not asked again.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any, Final

import pynvml

from collectors.gpu_device import GpmReading
from collectors.nvml_query import UNSUPPORTED_CODES, DeviceQueries, NvmlApi, error_reason

log = logging.getLogger(__name__)

_MIB: Final = float(1 << 20)
# (GpmReading field, NVML metric id, scale to the field's unit)
METRICS: Final[tuple[tuple[str, int, float], ...]] = (
    ("sm_activity_percent", pynvml.NVML_GPM_METRIC_SM_UTIL, 1.0),
    ("sm_occupancy_percent", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, 1.0),
    ("tensor_activity_percent", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 1.0),
    ("dram_bandwidth_percent", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, 1.0),
    ("pcie_tx_bytes_per_second", pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, _MIB),
    ("pcie_rx_bytes_per_second", pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, _MIB),
    ("nvlink_tx_bytes_per_second", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, _MIB),
    ("nvlink_rx_bytes_per_second", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, _MIB),
)
_PERCENT_MAX: Final = 100.0


def gpm_supported(api: NvmlApi, handle: Any) -> bool:
    """nvmlGpmQueryDeviceSupport says yes. Any error (an old driver or binding, a pre-Hopper GPU) is a no."""
    try:
        support = api.gpm_query_support(handle)
    except Exception:
        return False
    return bool(getattr(support, "isSupportedDevice", 0))


class GpmSampler:
    """GPM for one GPU. `open` returns None where the GPU has no GPM; `close` frees the samples."""

    __slots__ = ("_api", "_have_previous", "_metrics", "_problems", "_queries", "_samples")

    def __init__(self, api: NvmlApi, queries: DeviceQueries, problems: Counter[str], samples: list[Any]):
        self._api = api
        self._queries = queries
        self._problems = problems
        self._samples = samples
        self._have_previous = False
        self._metrics: list[tuple[str, int, float]] = list(METRICS)

    @classmethod
    def open(cls, api: NvmlApi, queries: DeviceQueries, problems: Counter[str]) -> GpmSampler | None:
        if not gpm_supported(api, queries.handle):
            return None
        samples: list[Any] = []
        try:
            for _ in range(2):
                samples.append(api.gpm_sample_alloc())
        except Exception:
            problems["gpm_alloc_failed"] += 1
            _free(api, samples)
            return None
        return cls(api, queries, problems, samples)

    def read(self) -> GpmReading | None:
        """Sample now; the metrics since the previous sample, or None (first sample, or it failed)."""
        previous, current = self._samples
        if self._queries.get("gpm_sample", self._api.gpm_sample_get, current) is None:
            self._have_previous = False  # GpuLost passes through; any other failure: start the pair again
            return None
        self._samples.reverse()  # this sample is the next round's previous one
        if not self._have_previous:
            self._have_previous = True
            return None
        return self._metrics_between(previous, current)

    def close(self) -> None:
        _free(self._api, self._samples)
        self._samples = []

    def _metrics_between(self, first: Any, second: Any) -> GpmReading | None:
        if not self._metrics:
            return None
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._metrics)
        request.sample1 = first
        request.sample2 = second
        for slot, (_field, metric_id, _scale) in enumerate(self._metrics):
            request.metrics[slot].metricId = metric_id
        try:
            self._api.gpm_metrics_get(request)
        except pynvml.NVMLError as exc:
            self._problems[f"gpm_{error_reason(getattr(exc, 'value', -1))}"] += 1
            return None
        except Exception:
            self._problems["binding_error"] += 1
            return None
        return GpmReading(**self._values(request))

    def _values(self, request: Any) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        dropped = []
        for slot, (field, metric_id, scale) in enumerate(self._metrics):
            metric = request.metrics[slot]
            code = int(metric.nvmlReturn)
            if code != pynvml.NVML_SUCCESS:
                if code in UNSUPPORTED_CODES:
                    dropped.append(metric_id)
                else:
                    self._problems[f"gpm_{error_reason(code)}"] += 1
                continue
            values[field] = _checked(float(metric.value), scale, percent=scale == 1.0)
        if dropped:
            self._metrics = [m for m in self._metrics if m[1] not in dropped]
        return values


def _checked(value: float, scale: float, *, percent: bool) -> float | None:
    """A driver value as the column holds it: finite, not negative, a percentage no more than 100."""
    if not math.isfinite(value) or value < 0:
        return None
    if percent:
        return min(value, _PERCENT_MAX)
    return value * scale


def _free(api: NvmlApi, samples: list[Any]) -> None:
    for sample in samples:
        try:
            api.gpm_sample_free(sample)
        except Exception:
            log.debug("nvmlGpmSampleFree failed", exc_info=True)
