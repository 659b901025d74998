"""The NVML collector against a scripted driver: fields and units, missing fields, lost GPUs, XIDs."""

from __future__ import annotations

import dataclasses

import pynvml
import pytest

from collectors.gpu_sampling import SamplingPlan
from collectors.nvml import NvmlCollector
from collectors.protocol import Collector, CollectorUnavailable
from fleetguard.records.telemetry import EventKind, GpuSample
from tests.collectors.nvml_stub import (
    CRC_DATA,
    CRC_FLIT,
    RECOVERY,
    REPLAY,
    FakeGpu,
    FakeNvLink,
    FakeNvml,
    h100,
    volta,
)

HOST = "gpu-node-017"
T0 = 1_700_000_000.0


def install(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], **kwargs: object) -> FakeNvml:
    return FakeNvml(gpus, **kwargs).install(monkeypatch)  # type: ignore[arg-type]


def one_sample(collector: NvmlCollector, now: float = T0) -> GpuSample:
    (sample,) = collector.collect(now).gpu_samples
    return sample


# ---- a healthy GPU -----------------------------------------------------------------------------------------


def test_a_healthy_h100_yields_every_field_in_the_record_units(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    gpu.nvlinks[3].errors.update({CRC_FLIT: 4, CRC_DATA: 1, REPLAY: 7, RECOVERY: 2})
    gpu.nvlinks[11].errors.update({CRC_FLIT: 6, REPLAY: 1})
    install(monkeypatch, [gpu])

    sample = one_sample(NvmlCollector(HOST))

    assert sample == GpuSample(
        ts=T0,
        host=HOST,
        gpu_index=0,
        uuid="GPU-5f2c1a7e-0000-4c4e-9a3b-000000000000",
        name="NVIDIA H100 80GB HBM3",
        serial="1652223012345",
        pci_bus_id="0000:18:00.0",
        driver_version="550.90.07",
        utilization_gpu_percent=97.0,
        utilization_memory_percent=41.0,
        memory_used_bytes=71_000_000_000,
        memory_total_bytes=85_520_809_984,
        temperature_celsius=52.0,
        power_watts=612.345,  # mW -> W
        energy_joules=9_876_543.21,  # mJ -> J
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
        performance_state=0,
        clocks_event_reasons=0x4,
        ecc_corrected_volatile=3,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=17,
        ecc_uncorrected_aggregate=1,
        retired_pages_sbe=0,
        retired_pages_dbe=0,
        retired_pages_pending=False,
        remapped_rows_corrected=2,
        remapped_rows_uncorrected=1,
        remapped_rows_pending=False,
        remapped_rows_failure=False,
        pcie_replay_errors=5,
        pcie_tx_bytes_per_second=1_250_000 * 1024.0,  # KB/s -> B/s
        pcie_rx_bytes_per_second=3_500_000 * 1024.0,
        pcie_link_gen=5,
        pcie_link_gen_max=5,
        pcie_link_width=16,
        pcie_link_width_max=16,
        nvlink_links_active=18,
        nvlink_crc_flit_errors=10,
        nvlink_crc_data_errors=1,
        nvlink_replay_errors=8,
        nvlink_recovery_errors=2,
        slow_read_ts=T0,  # the first round reads every field
        violation_power_seconds=12.5,  # ns -> s
        violation_thermal_seconds=0.0,
        # GPM needs two samples: its metrics come from the second round on (test_nvml_gpm.py)
    )


def test_the_collector_implements_the_collector_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST)
    assert isinstance(collector, Collector)
    assert collector.name == "nvml"
    assert collector.gpu_indices == [0]


def test_a_healthy_gpu_reports_no_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST)
    collector.collect(T0)
    assert collector.problems() == {}


def test_identity_is_read_once_however_many_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST)
    for i in range(5):
        collector.collect(T0 + i)
    for identity in (
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPciInfo",
        "nvmlSystemGetDriverVersion",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkWidth",
    ):
        assert fake.calls[identity] == 1, identity
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 5


def test_performance_state_unknown_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu(pstate=pynvml.NVML_PSTATE_UNKNOWN)])
    assert one_sample(NvmlCollector(HOST)).performance_state is None


def test_pcie_throughput_is_not_asked_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST, plan=SamplingPlan(read_pcie_throughput=False))
    sample = one_sample(collector)
    assert (sample.pcie_tx_bytes_per_second, sample.pcie_rx_bytes_per_second) == (None, None)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    # GPM's PCIe bandwidth still comes, at no extra cost, from the second round on
    assert one_sample(collector, T0 + 1).pcie_tx_bytes_per_second == 1200.0 * 2**20


# ---- fields a GPU does not have ----------------------------------------------------------------------------


def test_power_not_supported_is_none_and_every_other_field_intact(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu()])
    healthy = one_sample(NvmlCollector(HOST))
    monkeypatch.undo()
    install(monkeypatch, [FakeGpu(errors={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED})])

    sample = one_sample(NvmlCollector(HOST))

    assert sample.power_watts is None
    assert sample == dataclasses.replace(healthy, power_watts=None)


def test_an_unsupported_field_is_asked_once_and_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(
        monkeypatch, [FakeGpu(errors={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED})]
    )
    collector = NvmlCollector(HOST)
    for i in range(4):
        collector.collect(T0 + i)
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert collector.problems() == {"not_supported": 1}


def test_an_older_volta_gpu_reports_retired_pages_and_no_row_remapping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, [volta()])

    sample = one_sample(NvmlCollector(HOST))

    assert (sample.name, sample.pci_bus_id) == ("Tesla V100-SXM2-32GB", "0000:3b:00.0")
    assert (sample.retired_pages_sbe, sample.retired_pages_dbe, sample.retired_pages_pending) == (2, 1, True)
    assert (
        sample.remapped_rows_corrected,
        sample.remapped_rows_uncorrected,
        sample.remapped_rows_pending,
        sample.remapped_rows_failure,
    ) == (None, None, None, None)
    assert sample.nvlink_links_active == 6
    assert sample.ecc_corrected_aggregate == 17


def test_clocks_throttle_reasons_stand_in_when_the_driver_lacks_clocks_event_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(
        monkeypatch,
        [
            FakeGpu(
                clocks_event_reasons=0x40,
                errors={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND},
            )
        ],
    )
    collector = NvmlCollector(HOST)
    assert one_sample(collector, T0).clocks_event_reasons == 0x40
    assert one_sample(collector, T0 + 1).clocks_event_reasons == 0x40
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_clocks_throttle_reasons_stand_in_when_pynvml_lacks_clocks_event_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, [FakeGpu(clocks_event_reasons=0x8)])
    monkeypatch.delattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
    assert one_sample(NvmlCollector(HOST)).clocks_event_reasons == 0x8


def test_clocks_event_reasons_not_supported_is_none_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(
        monkeypatch,
        [FakeGpu(errors={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_NOT_SUPPORTED})],
    )
    assert one_sample(NvmlCollector(HOST)).clocks_event_reasons is None
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 0


def test_a_pcie_gpu_without_nvlink_has_no_nvlink_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu(name="NVIDIA H100 PCIe", nvlinks={})])
    sample = one_sample(NvmlCollector(HOST))
    assert sample.nvlink_links_active is None
    assert sample.nvlink_crc_flit_errors is None
    assert sample.nvlink_recovery_errors is None


def test_nvlink_errors_are_summed_over_active_links_only(monkeypatch: pytest.MonkeyPatch) -> None:
    links = {
        0: FakeNvLink(errors={CRC_FLIT: 1, CRC_DATA: 2, REPLAY: 3, RECOVERY: 4}),
        1: FakeNvLink(active=False, errors={CRC_FLIT: 100, CRC_DATA: 100, REPLAY: 100, RECOVERY: 100}),
        2: FakeNvLink(errors={CRC_FLIT: 10, CRC_DATA: 20, REPLAY: 30, RECOVERY: 40}),
    }
    install(monkeypatch, [FakeGpu(nvlinks=links)])
    sample = one_sample(NvmlCollector(HOST))
    assert sample.nvlink_links_active == 2
    assert (
        sample.nvlink_crc_flit_errors,
        sample.nvlink_crc_data_errors,
        sample.nvlink_replay_errors,
        sample.nvlink_recovery_errors,
    ) == (11, 22, 33, 44)


def test_nvlink_links_are_discovered_once_and_the_search_stops_at_invalid_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, [FakeGpu(nvlinks={0: FakeNvLink(), 1: FakeNvLink()})])
    collector = NvmlCollector(HOST)
    discovery = fake.calls["nvmlDeviceGetNvLinkState"]
    assert discovery == 3  # links 0 and 1, then link 2 answers INVALID_ARGUMENT
    collector.collect(T0)
    collector.collect(T0 + 1)  # NVLink state and errors are slow fields (5 calls per link)
    assert fake.calls["nvmlDeviceGetNvLinkState"] == discovery + 2
    collector.collect(T0 + 30)
    assert fake.calls["nvmlDeviceGetNvLinkState"] == discovery + 2 * 2


# ---- failures of one query ---------------------------------------------------------------------------------


def test_an_unknown_error_on_one_query_is_counted_and_that_field_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, [FakeGpu(errors={"nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_UNKNOWN})])
    collector = NvmlCollector(HOST)

    batch = collector.collect(T0)

    (sample,) = batch.gpu_samples
    assert sample.ecc_corrected_volatile is None
    assert sample.ecc_uncorrected_aggregate is None
    assert sample.temperature_celsius == 52.0
    assert batch.events == []
    assert collector.problems() == {"unknown": 4}


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, "no_permission"),
        (pynvml.NVML_ERROR_TIMEOUT, "timeout"),
        (pynvml.NVML_ERROR_NO_DATA, "no_data"),
        (4242, "error_4242"),
    ],
)
def test_a_failing_query_is_none_counted_by_reason_and_asked_again(
    monkeypatch: pytest.MonkeyPatch, code: int, reason: str
) -> None:
    fake = install(monkeypatch, [FakeGpu(errors={"nvmlDeviceGetTemperature": code})])
    collector = NvmlCollector(HOST)
    assert one_sample(collector, T0).temperature_celsius is None
    assert one_sample(collector, T0 + 1).temperature_celsius is None
    assert collector.problems() == {reason: 2}
    assert fake.calls["nvmlDeviceGetTemperature"] == 2


def test_a_binding_that_raises_something_else_costs_one_field(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu()])

    def broken(handle: object) -> int:
        raise TypeError("ctypes surprise")

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPcieReplayCounter", broken)
    collector = NvmlCollector(HOST)
    sample = one_sample(collector)
    assert sample.pcie_replay_errors is None
    assert sample.power_watts == 612.345
    assert collector.problems() == {"binding_error": 1}


# ---- lost GPUs ---------------------------------------------------------------------------------------------


def test_one_lost_gpu_of_eight_gives_one_event_and_the_other_seven_are_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpus = [h100(i) for i in range(8)]
    install(monkeypatch, gpus)
    collector = NvmlCollector(HOST)
    assert len(collector.collect(T0).gpu_samples) == 8

    gpus[5].lost = True
    batch = collector.collect(T0 + 1)

    assert sorted(s.gpu_index for s in batch.gpu_samples) == [0, 1, 2, 3, 4, 6, 7]
    (event,) = batch.events
    assert event.kind == EventKind.GPU_LOST
    assert (event.source, event.gpu_index, event.pci_bus_id) == ("nvml", 5, "0000:68:00.0")
    assert event.code == pynvml.NVML_ERROR_GPU_IS_LOST
    assert gpus[5].uuid in event.message
    assert collector.problems() == {"gpu_lost": 1}


def test_a_lost_gpu_is_reported_once_per_loss_not_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [h100(i) for i in range(2)]
    install(monkeypatch, gpus)
    collector = NvmlCollector(HOST, lost_retry_seconds=10)
    collector.collect(T0)
    gpus[1].lost = True
    events = [e for i in range(1, 60) for e in collector.collect(T0 + i).events]
    assert [e.kind for e in events] == [EventKind.GPU_LOST]


def test_a_lost_gpu_is_not_queried_until_the_retry_interval_has_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = FakeGpu()
    fake = install(monkeypatch, [gpu])
    collector = NvmlCollector(HOST, lost_retry_seconds=30)
    collector.collect(T0)
    gpu.lost = True
    collector.collect(T0 + 1)
    calls_after_loss = sum(fake.calls.values())
    for i in range(2, 31):
        assert collector.collect(T0 + i).gpu_samples == []
    assert sum(fake.calls.values()) - calls_after_loss == 29  # only the event-set drain, once per round


def test_a_lost_gpu_that_comes_back_is_sampled_again_and_can_be_lost_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpus = [h100(i) for i in range(2)]
    install(monkeypatch, gpus)
    collector = NvmlCollector(HOST, lost_retry_seconds=30)
    collector.collect(T0)
    gpus[0].lost = True
    collector.collect(T0 + 1)

    gpus[0].lost = False
    assert [s.gpu_index for s in collector.collect(T0 + 10).gpu_samples] == [1]  # not retried yet
    back = collector.collect(T0 + 31)
    assert sorted(s.gpu_index for s in back.gpu_samples) == [0, 1]
    assert back.events == []

    gpus[0].lost = True
    again = collector.collect(T0 + 32)
    assert [e.kind for e in again.events] == [EventKind.GPU_LOST]


def test_unknown_error_on_the_liveness_query_means_the_gpu_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    install(monkeypatch, [gpu])
    collector = NvmlCollector(HOST)
    collector.collect(T0)
    gpu.errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_UNKNOWN
    batch = collector.collect(T0 + 1)
    assert batch.gpu_samples == []
    assert [(e.kind, e.code) for e in batch.events] == [(EventKind.GPU_LOST, pynvml.NVML_ERROR_UNKNOWN)]


def test_unknown_error_on_a_field_means_lost_when_the_liveness_query_then_fails_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Older drivers say UNKNOWN for a GPU that fell off the bus; here it falls off in the middle of a round.
    install(monkeypatch, [FakeGpu()])
    fake_temperature, fake_memory_info = pynvml.nvmlDeviceGetTemperature, pynvml.nvmlDeviceGetMemoryInfo
    fell_off = [False]

    def temperature(handle: FakeGpu, sensor: int) -> object:
        if len(fell_off) > 1:
            fell_off[0] = True
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return fake_temperature(handle, sensor)

    def memory_info(handle: FakeGpu) -> object:
        if fell_off[0]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return fake_memory_info(handle)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperature", temperature)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", memory_info)
    collector = NvmlCollector(HOST)
    assert len(collector.collect(T0).gpu_samples) == 1
    fell_off.append(True)  # from now on the next temperature query is where the GPU goes

    batch = collector.collect(T0 + 1)

    assert batch.gpu_samples == []
    assert [e.kind for e in batch.events] == [EventKind.GPU_LOST]


def test_reset_required_is_reported_as_a_lost_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    install(monkeypatch, [gpu])
    collector = NvmlCollector(HOST)
    collector.collect(T0)
    gpu.errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_RESET_REQUIRED
    (event,) = collector.collect(T0 + 1).events
    assert (event.kind, event.code) == (EventKind.GPU_LOST, pynvml.NVML_ERROR_RESET_REQUIRED)


def test_a_gpu_lost_before_start_is_counted_and_joins_when_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpus = [h100(0), h100(1)]
    gpus[1].lost = True
    install(monkeypatch, gpus)
    collector = NvmlCollector(HOST, lost_retry_seconds=30)
    assert collector.problems() == {"gpu_unreachable_at_start": 1}
    assert collector.gpu_indices == [0, 1]
    first = collector.collect(T0)
    assert [s.gpu_index for s in first.gpu_samples] == [0]
    assert first.events == []  # it never answered: nothing was lost while we watched

    gpus[1].lost = False
    later = collector.collect(T0 + 30)
    assert sorted(s.gpu_index for s in later.gpu_samples) == [0, 1]
    assert later.gpu_samples[1].uuid == gpus[1].uuid


# ---- no usable driver --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            "NVIDIA driver not found (libnvidia-ml.so.1 missing): this host has no usable NVIDIA GPU; "
            "on a host without GPUs set collectors.nvml = false",
        ),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA kernel driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission to use NVML"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML library and kernel driver versions differ"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML could not start (Unknown Error)"),
    ],
)
def test_nvml_that_cannot_start_makes_the_collector_unavailable_with_one_sentence(
    monkeypatch: pytest.MonkeyPatch, code: int, expected: str
) -> None:
    install(monkeypatch, [FakeGpu()], init_error=code)
    with pytest.raises(CollectorUnavailable) as raised:
        NvmlCollector(HOST)
    message = str(raised.value)
    assert message.startswith(expected)
    assert "\n" not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_nvml_without_gpus_makes_the_collector_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, [])
    with pytest.raises(CollectorUnavailable, match="sees no GPU"):
        NvmlCollector(HOST)
    assert fake.shutdowns == 1


def test_close_frees_the_event_set_and_shuts_nvml_down_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST)
    collector.close()
    collector.close()
    assert (fake.event_sets_freed, fake.shutdowns) == (1, 1)
    assert len(collector.collect(T0)) == 0


# ---- XID events --------------------------------------------------------------------------------------------


def test_xid_events_are_drained_into_events(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, [h100(i) for i in range(8)])
    collector = NvmlCollector(HOST)
    fake.xid(3, 79)
    fake.xid(6, 48)

    batch = collector.collect(T0)

    assert [(e.kind, e.source, e.code, e.gpu_index, e.pci_bus_id) for e in batch.events] == [
        (EventKind.XID, "nvml", 79, 3, "0000:48:00.0"),
        (EventKind.XID, "nvml", 48, 6, "0000:78:00.0"),
    ]
    assert all(e.ts == T0 and e.host == HOST for e in batch.events)
    assert "Xid 79" in batch.events[0].message
    assert collector.collect(T0 + 1).events == []


def test_a_burst_of_the_same_xid_is_folded_and_every_occurrence_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST)
    for _ in range(500):
        fake.xid(0, 95)
    events = collector.collect(T0).events
    assert len(events) == 2  # the first as it came, then one row for the 499 repeats
    assert sum(e.count for e in events) == 500


def test_an_xid_backlog_beyond_the_round_limit_waits_for_the_next_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST, max_xid_events_per_collect=3, xid_fold_window_seconds=None)
    for xid in (13, 31, 43, 45, 48):
        fake.xid(0, xid)
    assert [e.code for e in collector.collect(T0).events] == [13, 31, 43]
    assert collector.problems() == {"xid_backlog_left": 1}
    assert [e.code for e in collector.collect(T0 + 1).events] == [45, 48]


def test_a_gpu_that_refuses_xid_registration_is_counted_and_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [h100(0), h100(1)]
    gpus[0].errors["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake = install(monkeypatch, gpus)
    collector = NvmlCollector(HOST)
    assert collector.problems() == {"xid_register_not_supported": 1}
    fake.xid(0, 79)  # never delivered: GPU 0 is not in the event set
    fake.xid(1, 74)
    batch = collector.collect(T0)
    assert [(e.gpu_index, e.code) for e in batch.events] == [(1, 74)]
    assert len(batch.gpu_samples) == 2


def test_without_an_event_set_samples_still_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu()], system_errors={"nvmlEventSetCreate": pynvml.NVML_ERROR_NOT_SUPPORTED})
    collector = NvmlCollector(HOST)
    assert len(collector.collect(T0).gpu_samples) == 1
    assert collector.problems() == {"xid_event_set_not_supported": 1}


def test_an_event_set_wait_error_other_than_timeout_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, [FakeGpu()], system_errors={"nvmlEventSetWait_v2": pynvml.NVML_ERROR_GPU_IS_LOST})
    collector = NvmlCollector(HOST)
    batch = collector.collect(T0)
    assert len(batch.gpu_samples) == 1
    assert collector.problems() == {"xid_wait_gpu_is_lost": 1}


def test_with_xid_events_off_no_event_set_is_made_and_no_xid_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, [FakeGpu()])
    collector = NvmlCollector(HOST, xid_events=False)
    fake.xid(0, 79)
    batch = collector.collect(T0)
    assert (batch.events, len(batch.gpu_samples)) == ([], 1)
    assert fake.calls["nvmlEventSetCreate"] == fake.calls["nvmlDeviceRegisterEvents"] == 0
    assert collector.problems() == {}
