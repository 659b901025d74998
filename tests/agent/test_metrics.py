"""/metrics: the exposition parses back, passes promtool, and counts what is cumulative as counters."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetguard.agent.metrics import MetricsState
from fleetguard.records.prediction import Prediction
from fleetguard.records.telemetry import Batch, Event, EventKind, GpuSample, NicCounterSample, NicSample


def render(state: MetricsState) -> str:
    registry = CollectorRegistry()
    registry.register(state)
    return generate_latest(registry).decode()


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def gpu(index: int, **kw: object) -> GpuSample:
    base: dict[str, object] = dict(
        ts=1.0,
        host="h",
        gpu_index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA H100",
        temperature_celsius=60.0,
        power_watts=650.0,
        utilization_gpu_percent=95.0,
        ecc_corrected_volatile=3,
        ecc_uncorrected_volatile=0,
        sm_clock_mhz=1980,
        clocks_event_reasons=0x40,
        energy_joules=1000.0,
    )
    base.update(kw)
    return GpuSample(**base)  # type: ignore[arg-type]


@pytest.fixture
def state() -> MetricsState:
    s = MetricsState()
    xid = Event(1.0, "h", EventKind.XID, "kmsg", "Xid 79", code=79, pci_bus_id="0000:9b:00.0")
    s.observe(
        Batch(
            gpu_samples=[gpu(0, pci_bus_id="00000000:9B:00.0"), gpu(1, power_watts=None)],
            nic_samples=[NicSample(1.0, "h", "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")],
            nic_counters=[NicCounterSample(1.0, "h", "mlx5_0", 1, "symbol_error", "counters", 17)],
            events=[
                xid,
                Event(
                    2.0, "h", EventKind.XID, "kmsg", "Xid 79", code=79, pci_bus_id="0000:9b:00.0", count=41
                ),
            ],
        )
    )
    s.set_problems("rdma", {"garbage_value": 2})
    s.set_collector_up("nvml", True)
    s.set_predictions([Prediction(1.0, "h", "GPU-0", 0.9, 1, "m", 168.0)])
    s.stats.rounds = 12
    return s


def test_every_xid_occurrence_is_counted_including_folded_repeats(state: MetricsState) -> None:
    text = render(state)
    labels = (("gpu", "0"), ("host", "h"), ("pci_bus_id", "0000:9b:00.0"), ("uuid", "GPU-0"), ("xid", "79"))
    assert samples(text, "fleetguard_gpu_xid_errors_total") == {labels: 42.0}
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert types["fleetguard_gpu_xid_errors"] == "counter"


def test_latest_readings_are_gauges_in_base_units(state: MetricsState) -> None:
    text = render(state)
    labels = (("gpu", "0"), ("host", "h"), ("uuid", "GPU-0"))
    assert samples(text, "fleetguard_gpu_temperature_celsius")[labels] == 60.0
    assert samples(text, "fleetguard_gpu_utilization_ratio")[labels] == pytest.approx(0.95)
    assert samples(text, "fleetguard_gpu_sm_clock_hertz")[labels] == 1.98e9
    assert samples(text, "fleetguard_nic_port_rate_bytes_per_second") == {
        (("device", "mlx5_0"), ("host", "h"), ("port", "1")): 400e9 / 8
    }


def test_cumulative_hardware_counts_are_counters(state: MetricsState) -> None:
    text = render(state)
    ecc = samples(text, "fleetguard_gpu_ecc_errors_total")
    assert (
        ecc[(("gpu", "0"), ("host", "h"), ("scope", "volatile"), ("type", "corrected"), ("uuid", "GPU-0"))]
        == 3
    )
    port = (("counter", "symbol_error"), ("device", "mlx5_0"), ("host", "h"), ("port", "1"))
    assert samples(text, "fleetguard_nic_port_errors_total")[port] == 17
    assert samples(text, "fleetguard_gpu_energy_joules_total")


def test_an_unsupported_field_exports_no_series_rather_than_zero(state: MetricsState) -> None:
    power = samples(render(state), "fleetguard_gpu_power_watts")
    assert list(power) == [(("gpu", "0"), ("host", "h"), ("uuid", "GPU-0"))]


def test_throttle_reasons_are_one_series_per_reason(state: MetricsState) -> None:
    reasons = samples(render(state), "fleetguard_gpu_clocks_event_active")
    active = {dict(k)["reason"] for k, v in reasons.items() if v == 1.0 and dict(k)["gpu"] == "0"}
    assert active == {"hw_thermal_slowdown"}


def test_a_lost_gpu_stops_being_exported(state: MetricsState) -> None:
    state.forget_gpu("h", 0)
    assert {dict(k)["gpu"] for k in samples(render(state), "fleetguard_gpu_temperature_celsius")} == {"1"}


def test_agent_health_and_risk_are_exported(state: MetricsState) -> None:
    text = render(state)
    assert samples(text, "fleetguard_agent_rounds_total") == {(): 12.0}
    assert samples(text, "fleetguard_collector_skipped_inputs_total") == {
        (("collector", "rdma"), ("reason", "garbage_value")): 2.0
    }
    assert samples(text, "fleetguard_gpu_failure_risk") == {
        (("gpu", "0"), ("host", "h"), ("uuid", "GPU-0")): 0.9
    }


def test_promtool_accepts_the_exposition(state: MetricsState) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs Debian's prometheus package"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=render(state), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_rows_lost_or_set_aside_by_the_store_are_counted(state: MetricsState) -> None:
    state.stats.dropped_rows, state.stats.rejected_rows = 12, 3
    text = render(state)
    assert samples(text, "fleetguard_store_dropped_rows_total") == {(): 12.0}
    assert samples(text, "fleetguard_store_rejected_rows_total") == {(): 3.0}
