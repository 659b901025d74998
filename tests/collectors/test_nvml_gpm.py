"""GPM profiling metrics through NVML: where the GPU has them (Hopper), where it does not, and bad answers."""

from __future__ import annotations

import logging

import pynvml
import pytest

from collectors.nvml import NvmlCollector
from fleetguard.agent.sources import build_sources
from fleetguard.config import load_config
from fleetguard.records.telemetry import EventKind, GpuSample
from tests.collectors.nvml_stub import H100_GPM, FakeGpu, FakeNvml, h100, h100_as_recorded, volta

HOST = "gpu-node-017"
T0 = 1_700_000_000.0
MIB = 2.0**20


def rounds(collector: NvmlCollector, n: int) -> list[GpuSample]:
    return [s for i in range(n) for s in collector.collect(T0 + i).gpu_samples]


def gpm_fields(s: GpuSample) -> tuple[float | None, ...]:
    return (
        s.gpm_sm_activity_percent,
        s.gpm_sm_occupancy_percent,
        s.gpm_tensor_activity_percent,
        s.gpm_dram_bandwidth_percent,
        s.nvlink_tx_bytes_per_second,
        s.nvlink_rx_bytes_per_second,
    )


def test_a_hopper_gpu_reports_gpm_metrics_from_its_second_round(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    collector = NvmlCollector(HOST)
    first, second = rounds(collector, 2)
    assert gpm_fields(first) == (None,) * 6  # GPM measures between two samples
    assert gpm_fields(second) == (91.5, 48.25, 63.0, 37.5, 150_000.0 * MIB, 149_000.0 * MIB)
    assert (second.pcie_tx_bytes_per_second, second.pcie_rx_bytes_per_second) == (1200.0 * MIB, 3400.0 * MIB)
    assert collector.problems() == {}
    assert collector.notes == []


def test_a_gpu_without_gpm_leaves_the_columns_empty_and_says_so_once_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml([h100(0), volta(1)]).install(monkeypatch)
    with caplog.at_level(logging.INFO, logger="collectors.nvml"):
        collector = NvmlCollector(HOST)
    hopper, older = (s for s in rounds(collector, 3)[-2:])
    assert gpm_fields(older) == (None,) * 6
    assert gpm_fields(hopper)[0] == 91.5
    assert older.pcie_tx_bytes_per_second == 1_250_000 * 1024.0  # from nvmlDeviceGetPcieThroughput instead
    (note,) = collector.notes
    assert "GPU 1 (Tesla V100-SXM2-32GB)" in note and "GPU 0" not in note
    assert [r.getMessage() for r in caplog.records] == [note]
    assert fake.calls["nvmlGpmSampleGet"] == 3  # the H100's only


def test_a_binding_without_gpm_functions_reads_as_no_gpm(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    monkeypatch.delattr(pynvml, "nvmlGpmQueryDeviceSupport")
    collector = NvmlCollector(HOST)
    assert gpm_fields(rounds(collector, 2)[-1]) == (None,) * 6
    assert len(collector.notes) == 1
    assert collector.problems() == {}


def test_metrics_a_gpu_does_not_offer_are_none_and_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The recorded H100 was alone: NVLink bandwidth answers NOT_SUPPORTED metric by metric.
    gpu = h100_as_recorded()
    assert gpu.gpm is not None
    for metric in (
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    ):
        gpu.gpm[metric] = pynvml.NVML_ERROR_NOT_SUPPORTED
    asked: list[int] = []
    fake = FakeNvml([gpu]).install(monkeypatch)
    metrics_get = pynvml.nvmlGpmMetricsGet

    def counting(request: pynvml.c_nvmlGpmMetricsGet_t) -> object:
        asked.append(int(request.numMetrics))
        return metrics_get(request)

    monkeypatch.setattr(pynvml, "nvmlGpmMetricsGet", counting)
    samples = rounds(NvmlCollector(HOST), 4)
    assert [s.nvlink_tx_bytes_per_second for s in samples] == [None] * 4
    assert samples[-1].gpm_tensor_activity_percent == 63.0
    assert asked == [len(H100_GPM), len(H100_GPM) - 2, len(H100_GPM) - 2]
    assert fake.calls["nvmlGpmSampleGet"] == 4


@pytest.mark.parametrize(
    ("value", "stored"),
    [(float("nan"), None), (float("inf"), None), (-3.0, None), (140.0, 100.0), (0.0, 0.0)],
)
def test_a_percentage_the_column_cannot_hold_is_dropped_or_capped(
    monkeypatch: pytest.MonkeyPatch, value: float, stored: float | None
) -> None:
    gpu = FakeGpu()
    assert gpu.gpm is not None
    gpu.gpm[pynvml.NVML_GPM_METRIC_SM_OCCUPANCY] = value
    FakeNvml([gpu]).install(monkeypatch)
    assert rounds(NvmlCollector(HOST), 2)[-1].gpm_sm_occupancy_percent == stored


def test_a_metric_error_other_than_unsupported_is_counted_and_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = FakeGpu()
    assert gpu.gpm is not None
    gpu.gpm[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL] = pynvml.NVML_ERROR_UNKNOWN
    FakeNvml([gpu]).install(monkeypatch)
    collector = NvmlCollector(HOST)
    samples = rounds(collector, 3)
    assert [s.gpm_dram_bandwidth_percent for s in samples] == [None] * 3
    assert collector.problems() == {"gpm_unknown": 2}


def test_a_gpu_lost_while_taking_a_gpm_sample_is_reported_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    FakeNvml([gpu]).install(monkeypatch)
    collector = NvmlCollector(HOST)
    collector.collect(T0)
    gpu.errors["nvmlGpmSampleGet"] = pynvml.NVML_ERROR_GPU_IS_LOST
    batch = collector.collect(T0 + 1)
    assert batch.gpu_samples == []
    assert [e.kind for e in batch.events] == [EventKind.GPU_LOST]


def test_close_frees_both_gpm_samples_of_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([h100(0), h100(1)]).install(monkeypatch)
    collector = NvmlCollector(HOST)
    rounds(collector, 2)
    collector.close()
    assert fake.gpm_samples_freed == 4


def test_gpus_without_gpm_are_named_once_among_the_agents_start_up_notes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    FakeNvml([h100(0), volta(1)]).install(monkeypatch)
    config = load_config(env={}, overrides={"collectors.rdma": False, "collectors.kmsg": False})
    (note,) = build_sources(config).unavailable
    assert note.startswith(
        "nvml: GPM profiling metrics (SM occupancy, tensor activity, DRAM bandwidth) are not"
    )
    assert "GPU 1 (Tesla V100-SXM2-32GB)" in note and "GPU 0" not in note
