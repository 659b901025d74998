"""/metrics for what a real H100 adds: GPM ratios, NVLink bandwidth, violation time, slow-read age."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.simulated import SimulatedFleet, SimulatedGpuCollector
from fleetguard.agent.metrics import MetricsState
from fleetguard.records.telemetry import Batch, GpuSample

T0 = 1_700_000_000.0


def scrape(samples: list[GpuSample]) -> dict[str, dict[str, float]]:
    """{metric sample name: {gpu label: value}} as a scrape shows it."""
    state = MetricsState()
    state.observe(Batch(gpu_samples=samples))
    registry = CollectorRegistry()
    registry.register(state)
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[s.labels.get("gpu", "")] = s.value
    return out


def h100(index: int, **fields: object) -> GpuSample:
    return GpuSample(ts=T0, host="h", gpu_index=index, uuid=f"GPU-{index}", **fields)  # type: ignore[arg-type]


def test_gpm_metrics_are_ratios_and_absent_where_the_gpu_has_no_gpm() -> None:
    hopper = h100(
        0,
        gpm_sm_activity_percent=91.5,
        gpm_sm_occupancy_percent=48.0,
        gpm_tensor_activity_percent=63.0,
        gpm_dram_bandwidth_percent=37.5,
        nvlink_tx_bytes_per_second=1.5e11,
        nvlink_rx_bytes_per_second=1.4e11,
    )
    text = scrape([hopper, h100(1)])  # GPU 1: a V100, no GPM
    assert text["fleetguard_gpu_sm_activity_ratio"] == {"0": 0.915}
    assert text["fleetguard_gpu_sm_occupancy_ratio"] == {"0": 0.48}
    assert text["fleetguard_gpu_tensor_activity_ratio"] == {"0": 0.63}
    assert text["fleetguard_gpu_dram_bandwidth_ratio"] == {"0": 0.375}
    assert text["fleetguard_gpu_nvlink_tx_bytes_per_second"] == {"0": 1.5e11}
    assert text["fleetguard_gpu_nvlink_rx_bytes_per_second"] == {"0": 1.4e11}


def test_violation_time_is_a_counter_and_the_slow_read_time_a_gauge() -> None:
    text = scrape(
        [h100(0, violation_power_seconds=12.5, violation_thermal_seconds=0.0, slow_read_ts=T0 - 20)]
    )
    assert text["fleetguard_gpu_power_violation_seconds_total"] == {"0": 12.5}
    assert text["fleetguard_gpu_thermal_violation_seconds_total"] == {"0": 0.0}
    assert text["fleetguard_gpu_slow_fields_read_timestamp_seconds"] == {"0": T0 - 20}


def test_the_simulated_fleet_fills_every_new_family() -> None:
    collector = SimulatedGpuCollector(SimulatedFleet(1, 2, seed=5))
    text = scrape(collector.collect(T0).gpu_samples)
    for name in (
        "fleetguard_gpu_sm_activity_ratio",
        "fleetguard_gpu_sm_occupancy_ratio",
        "fleetguard_gpu_tensor_activity_ratio",
        "fleetguard_gpu_dram_bandwidth_ratio",
        "fleetguard_gpu_nvlink_tx_bytes_per_second",
        "fleetguard_gpu_power_violation_seconds_total",
        "fleetguard_gpu_slow_fields_read_timestamp_seconds",
    ):
        assert set(text[name]) == {"0", "1"}, name
        assert all(v >= 0 for v in text[name].values()), name
    assert all(0 < v <= 1 for v in text["fleetguard_gpu_tensor_activity_ratio"].values())
