"""What Prometheus users get: a lost GPU shows 0 on fleetguard_gpu_up instead of vanishing; NIC counters in
families of one unit each; XIDs, SXIDs and risk named by GPU index as well as bus id / UUID."""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.simulated_hardware import PORT_COUNTERS
from fleetguard.agent.metrics import MetricsState
from fleetguard.agent.nic_families import CLASSIFICATION, FAMILIES
from fleetguard.records.prediction import Prediction
from fleetguard.records.telemetry import Batch, Event, EventKind, GpuSample, NicCounterSample

Labels = tuple[tuple[str, str], ...]


def render(state: MetricsState) -> str:
    registry = CollectorRegistry()
    registry.register(state)
    return generate_latest(registry).decode()


def samples(state: MetricsState, name: str) -> dict[Labels, float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(render(state))
        for s in family.samples
        if s.name == name
    }


def gpu(index: int, host: str = "h") -> GpuSample:
    return GpuSample(
        ts=1.0,
        host=host,
        gpu_index=index,
        uuid=f"GPU-{host}-{index}",
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        temperature_celsius=50.0,
    )


def up(state: MetricsState) -> dict[tuple[str, str], float]:
    return {(dict(k)["host"], dict(k)["gpu"]): v for k, v in samples(state, "fleetguard_gpu_up").items()}


def test_a_gpu_missing_from_its_hosts_round_shows_0_and_its_readings_go() -> None:
    state = MetricsState()
    state.observe(Batch(gpu_samples=[gpu(0), gpu(1)]))
    assert up(state) == {("h", "0"): 1.0, ("h", "1"): 1.0}
    state.observe(Batch(gpu_samples=[gpu(0)]))
    assert up(state) == {("h", "0"): 1.0, ("h", "1"): 0.0}
    temps = samples(state, "fleetguard_gpu_temperature_celsius")
    assert {dict(k)["gpu"] for k in temps} == {"0"}  # no stale reading looks live
    state.observe(Batch(gpu_samples=[gpu(0), gpu(1)]))
    assert up(state) == {("h", "0"): 1.0, ("h", "1"): 1.0}


def test_a_gpu_reported_lost_shows_0_with_its_uuid() -> None:
    state = MetricsState()
    state.observe(Batch(gpu_samples=[gpu(0), gpu(1)]))
    state.forget_gpu("h", 1)
    assert samples(state, "fleetguard_gpu_up")[(("gpu", "1"), ("host", "h"), ("uuid", "GPU-h-1"))] == 0.0


def test_a_round_of_one_host_leaves_the_other_hosts_gpus_up() -> None:
    state = MetricsState()
    state.observe(Batch(gpu_samples=[gpu(0, "a"), gpu(0, "b")]))
    state.observe(Batch(gpu_samples=[gpu(0, "a")]))
    state.observe(
        Batch(events=[Event(2.0, "b", EventKind.XID, "kmsg", "Xid 13", code=13)])
    )  # no samples at all
    assert up(state) == {("a", "0"): 1.0, ("b", "0"): 1.0}


def test_one_xid_from_nvml_by_index_and_the_kernel_by_bus_id_is_one_series_named_by_gpu() -> None:
    state = MetricsState()
    state.observe(Batch(gpu_samples=[gpu(0), gpu(1)]))
    nvml = Event(
        2.0, "h", EventKind.XID, "nvml", "Xid 79", code=79, pci_bus_id="00000000:19:00.0", gpu_index=1
    )
    kernel = Event(3.0, "h", EventKind.XID, "kmsg", "Xid 79", code=79, pci_bus_id="0000:19:00.0", count=2)
    state.observe(Batch(events=[nvml, kernel]))
    xids = samples(state, "fleetguard_gpu_xid_errors_total")
    labels = (("gpu", "1"), ("host", "h"), ("pci_bus_id", "0000:19:00.0"), ("uuid", "GPU-h-1"), ("xid", "79"))
    assert xids == {labels: 3.0}


def test_an_xid_on_a_bus_id_no_gpu_has_keeps_its_bus_id_and_an_empty_gpu() -> None:
    state = MetricsState()
    state.observe(
        Batch(events=[Event(2.0, "h", EventKind.XID, "kmsg", "Xid 79", code=79, pci_bus_id="0000:9b:00.0")])
    )
    labels = (("gpu", ""), ("host", "h"), ("pci_bus_id", "0000:9b:00.0"), ("uuid", ""), ("xid", "79"))
    assert samples(state, "fleetguard_gpu_xid_errors_total") == {labels: 1.0}


def test_sxids_are_counted_per_nvswitch_and_code() -> None:
    state = MetricsState()
    sxid = Event(
        2.0,
        "h",
        EventKind.SXID,
        "kmsg",
        "SXid 12028",
        code=12028,
        pci_bus_id="0000:05:00.0",
        device="nvidia-nvswitch3",
    )
    state.observe(Batch(events=[sxid, sxid]))
    labels = (
        ("host", "h"),
        ("nvswitch", "nvidia-nvswitch3"),
        ("pci_bus_id", "0000:05:00.0"),
        ("sxid", "12028"),
    )
    assert samples(state, "fleetguard_nvswitch_sxid_errors_total") == {labels: 2.0}


def test_risk_is_labelled_with_the_gpu_index() -> None:
    state = MetricsState()
    state.observe(Batch(gpu_samples=[gpu(3)]))
    state.set_predictions([Prediction(1.0, "h", "GPU-h-3", 0.8, 1, "m", 168.0)])
    assert samples(state, "fleetguard_gpu_failure_risk") == {
        (("gpu", "3"), ("host", "h"), ("uuid", "GPU-h-3")): 0.8
    }


def nic(counter: str, value: int, group: str = "counters") -> NicCounterSample:
    return NicCounterSample(1.0, "h", "mlx5_0", 1, counter, group, value)


def test_nic_counters_land_in_families_of_one_unit() -> None:
    state = MetricsState()
    counters = [
        nic("port_xmit_data", 1000),
        nic("port_rcv_data", 500),
        nic("port_xmit_packets", 30),
        nic("port_rcv_packets", 20),
        nic("symbol_error", 2),
        nic("link_downed", 1),
        nic("out_of_sequence", 5, "hw_counters"),
        nic("np_cnp_sent", 7, "hw_counters"),
        nic("port_xmit_wait", 99),
        nic("unicast_xmit_packets", 25),  # a breakdown of port_xmit_packets: summing it would count twice
        nic("vendor_specific_thing", 4, "hw_counters"),  # unit unknown
    ]
    state.observe(Batch(nic_counters=counters))
    port = (("device", "mlx5_0"), ("host", "h"), ("port", "1"))
    assert (
        samples(state, "fleetguard_nic_port_data_bytes_total")
        == {
            (port[0], ("direction", "rx"), *port[1:]): 2000.0,  # 4-octet units to bytes
            (port[0], ("direction", "tx"), *port[1:]): 4000.0,
        }
    )
    packets = samples(state, "fleetguard_nic_port_packets_total")
    assert sum(packets.values()) == 50.0
    errors = {dict(k)["counter"]: v for k, v in samples(state, "fleetguard_nic_port_errors_total").items()}
    assert errors == {"symbol_error": 2.0, "link_downed": 1.0, "out_of_sequence": 5.0}
    congestion = samples(state, "fleetguard_nic_port_congestion_packets_total")
    assert list(congestion.values()) == [7.0]
    assert samples(state, "fleetguard_nic_port_xmit_wait_ticks_total") == {port: 99.0}
    text = render(state)
    assert "unicast_xmit_packets" not in text and "vendor_specific_thing" not in text
    assert "fleetguard_nic_port_stat" not in text  # the mixed-unit family is gone


def test_every_counter_the_simulated_nic_reports_has_a_family() -> None:
    assert {(group, name) for name, group in PORT_COUNTERS} <= set(CLASSIFICATION)
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)


def test_promtool_accepts_the_new_families() -> None:
    state = MetricsState()
    state.observe(
        Batch(gpu_samples=[gpu(0), gpu(1)], nic_counters=[nic("port_xmit_data", 1), nic("symbol_error", 1)])
    )
    state.observe(Batch(gpu_samples=[gpu(0)]))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs Debian's prometheus package"
    result = subprocess.run(
        [promtool, "check", "metrics"], input=render(state), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
