"""Each scripted fault of the simulated fleet shows the signal shape a real one would."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import pynvml
import pytest

from collectors.gpu_sampling import SamplingPlan
from collectors.kmsg_classify import classify_kernel_message
from collectors.protocol import Collector
from collectors.simulated import (
    EccRampThenDbe,
    FaultScript,
    GpuFallOffBus,
    IbCounterReset,
    IbLinkFlap,
    IbSymbolErrors,
    NvlinkCrcBurst,
    SimulatedFleet,
    SimulatedGpuCollector,
    SimulatedKmsgCollector,
    SimulatedNicCollector,
    ThermalThrottle,
    XidStorm,
    default_demo_faults,
)
from collectors.simulated_hardware import (
    CLOCKS_EVENT_HW_SLOWDOWN,
    CLOCKS_EVENT_HW_THERMAL_SLOWDOWN,
    CLOCKS_EVENT_SW_POWER_CAP,
    CLOCKS_EVENT_SW_THERMAL_SLOWDOWN,
)
from collectors.simulated_kernel_log import XID_DETAILS
from fleetguard.records.telemetry import Batch, Event, EventKind, GpuSample, NicCounterSample, NicSample

T0 = 1_700_000_000.0
XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): (\d+), "
    r"(pid=\d+, name=python|pid='<unknown>', name=<unknown>), .+"
)
THERMAL_BITS = CLOCKS_EVENT_SW_THERMAL_SLOWDOWN | CLOCKS_EVENT_HW_THERMAL_SLOWDOWN | CLOCKS_EVENT_HW_SLOWDOWN


def simulate(faults: list[FaultScript], seconds: float, step: float = 1.0, gpus: int = 8) -> list[Batch]:
    """Read a one-host fleet with `faults` every `step` seconds from its start for `seconds`, every field
    every round (these tests follow the faults, not the cadence: test_simulated.py has that)."""
    fleet = SimulatedFleet(1, gpus, seed=1, start_ts=T0, faults=faults)
    cs: list[Collector] = [
        SimulatedGpuCollector(fleet, SamplingPlan.every(0.0)),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    rounds = []
    for i in range(int(seconds / step) + 1):
        batch = Batch()
        for c in cs:
            batch.extend(c.collect(T0 + i * step))
        rounds.append(batch)
    return rounds


def gpu_series(rounds: list[Batch], gpu: int) -> list[GpuSample]:
    return [s for b in rounds for s in b.gpu_samples if s.gpu_index == gpu]


def port_series(rounds: list[Batch], device: str) -> list[NicSample]:
    return [p for b in rounds for p in b.nic_samples if p.device == device]


def counter_series(rounds: list[Batch], device: str, counter: str) -> list[NicCounterSample]:
    return [c for b in rounds for c in b.nic_counters if c.device == device and c.counter == counter]


def events(rounds: list[Batch], kind: EventKind | None = None) -> list[Event]:
    return [e for b in rounds for e in b.events if kind is None or e.kind == kind]


def xids(rounds: list[Batch]) -> list[int | None]:
    return [e.code for e in events(rounds, EventKind.XID)]


CUMULATIVE_GPU_FIELDS = (
    "energy_joules",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate",
    "remapped_rows_corrected",
    "remapped_rows_uncorrected",
    "pcie_replay_errors",
    "nvlink_crc_flit_errors",
    "nvlink_crc_data_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
)


def test_clock_event_bits_are_nvml_values() -> None:
    assert pynvml.nvmlClocksEventReasonSwPowerCap == CLOCKS_EVENT_SW_POWER_CAP
    assert pynvml.nvmlClocksEventReasonHwSlowdown == CLOCKS_EVENT_HW_SLOWDOWN
    assert pynvml.nvmlClocksEventReasonSwThermalSlowdown == CLOCKS_EVENT_SW_THERMAL_SLOWDOWN
    assert pynvml.nvmlClocksEventReasonHwThermalSlowdown == CLOCKS_EVENT_HW_THERMAL_SLOWDOWN


# ---- ECC ramp then double-bit error ------------------------------------------------------------------------

ECC = EccRampThenDbe(host=0, gpu=2, start_seconds=20, ramp_seconds=100, corrected_errors=300, remapped_rows=3)


@pytest.fixture(scope="module")
def ecc_rounds() -> list[Batch]:
    return simulate([ECC], 180, step=2)


def test_ecc_ramp_climbs_monotonically_by_the_scripted_count(ecc_rounds: list[Batch]) -> None:
    corrected = [s.ecc_corrected_volatile or 0 for s in gpu_series(ecc_rounds, 2)]
    assert corrected == sorted(corrected)
    assert corrected[-1] - corrected[0] == 300
    ramp = corrected[10:61]  # t = 20 .. 120 s
    assert ramp[-1] - ramp[len(ramp) // 2] > ramp[len(ramp) // 2] - ramp[0]  # errors accelerate


def test_ecc_ramp_ends_in_exactly_one_uncorrected_error_at_the_dbe_time(ecc_rounds: list[Batch]) -> None:
    series = gpu_series(ecc_rounds, 2)
    for field in ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_uncorrected"):
        before = [getattr(s, field) for s in series if s.ts < T0 + ECC.dbe_seconds]
        after = [getattr(s, field) for s in series if s.ts >= T0 + ECC.dbe_seconds]
        assert set(before) == {0} and set(after) == {1}, field
    assert [s.remapped_rows_pending for s in series if s.ts >= T0 + ECC.dbe_seconds] == [True] * 31


def test_ecc_ramp_remaps_rows_with_an_xid_63_each(ecc_rounds: list[Batch]) -> None:
    remapped = [s.remapped_rows_corrected or 0 for s in gpu_series(ecc_rounds, 2)]
    assert remapped == sorted(remapped) and remapped[-1] == remapped[0] + 3
    assert Counter(xids(ecc_rounds))[63] == 3 + 1  # three while correcting, one for the DBE's row


def test_ecc_ramp_logs_one_xid_48_naming_the_training_process(ecc_rounds: list[Batch]) -> None:
    (dbe,) = [e for e in events(ecc_rounds, EventKind.XID) if e.code == 48]
    assert dbe.ts == T0 + ECC.dbe_seconds
    assert dbe.gpu_index == 2 and dbe.pid is not None and dbe.process_name == "python"
    assert dbe.pci_bus_id == gpu_series(ecc_rounds, 2)[0].pci_bus_id
    assert dbe.pci_bus_id is not None
    assert re.fullmatch(
        rf"NVRM: Xid \(PCI:{dbe.pci_bus_id[:-2]}\): 48, pid={dbe.pid}, name=python, "
        r"An uncorrectable double bit error \(DBE\) has been detected on GPU in the framebuffer at physAddr "
        r"0x[0-9a-f]+ partition \d, subpartition \d",
        dbe.message,
    )
    assert dbe.source == "simulated"


def test_ecc_ramp_totals_do_not_depend_on_the_sampling_interval() -> None:
    def final_counts(step: float) -> tuple[int, int, int]:
        last = gpu_series(simulate([ECC], 140, step=step), 2)[-1]
        return (
            last.ecc_corrected_volatile or 0,
            last.ecc_uncorrected_volatile or 0,
            last.remapped_rows_corrected or 0,
        )

    assert final_counts(1) == final_counts(7) == final_counts(140)


# ---- GPU falls off the bus ---------------------------------------------------------------------------------


def test_gpu_that_falls_off_logs_xid_79_and_the_fallen_off_line() -> None:
    rounds = simulate([GpuFallOffBus(host=0, gpu=5, start_seconds=10)], 20)
    xid, gone = events(rounds, EventKind.XID) + events(rounds, EventKind.GPU_FALLEN_OFF_BUS)
    assert xid.code == 79 and xid.ts == gone.ts == T0 + 10
    assert (
        xid.message
        == "NVRM: Xid (PCI:0000:ab:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert gone.message == "NVRM: GPU at PCI:0000:ab:00: GPU has fallen off the bus."
    assert (gone.gpu_index, gone.pci_bus_id) == (5, "0000:ab:00.0")


def test_gpu_that_falls_off_is_reported_lost_once_then_stops_reporting() -> None:
    rounds = simulate([GpuFallOffBus(host=0, gpu=5, start_seconds=10)], 20)
    (lost,) = events(rounds, EventKind.GPU_LOST)
    assert (lost.ts, lost.gpu_index, lost.source) == (T0 + 10, 5, "simulated")
    assert [s.ts for s in gpu_series(rounds, 5)] == [T0 + t for t in range(10)]
    assert len(gpu_series(rounds, 4)) == 21


# ---- XID storm ---------------------------------------------------------------------------------------------


def test_xid_storm_logs_every_event_within_its_window() -> None:
    storm = XidStorm(host=0, gpu=1, start_seconds=5, duration_seconds=10, events=90)
    logged = events(simulate([storm], 30), EventKind.XID)
    assert len(logged) == 90
    assert Counter(e.code for e in logged) == {13: 30, 31: 30, 43: 30}
    assert min(e.ts for e in logged) == T0 + 5 and max(e.ts for e in logged) <= T0 + 15
    assert all(XID_LINE.fullmatch(e.message) and e.gpu_index == 1 for e in logged)


def test_xid_storm_lines_carry_increasing_kernel_sequence_numbers() -> None:
    logged = events(simulate([XidStorm(host=0, gpu=1, start_seconds=0, duration_seconds=3, events=50)], 5))
    seqs = [e.seq or 0 for e in logged]
    assert seqs == list(range(seqs[0], seqs[0] + 50))


def test_a_kmsg_reader_that_falls_behind_counts_the_lines_it_lost() -> None:
    fleet = SimulatedFleet(
        1,
        1,
        start_ts=T0,
        faults=[XidStorm(host=0, gpu=0, start_seconds=0, duration_seconds=0, events=20_000)],
    )
    kmsg = SimulatedKmsgCollector(fleet)
    got = kmsg.collect(T0)
    assert len(got.events) == 16_384
    assert kmsg.problems() == {"kernel_log_lines_lost": 20_000 - 16_384}


# ---- NVLink CRC burst --------------------------------------------------------------------------------------


def test_nvlink_crc_burst_adds_the_scripted_errors_during_its_window() -> None:
    burst = NvlinkCrcBurst(host=0, gpu=6, start_seconds=10, duration_seconds=20, crc_flit_errors=4000)
    series = gpu_series(simulate([burst], 40), 6)
    flits = [s.nvlink_crc_flit_errors or 0 for s in series]
    assert flits == sorted(flits)
    assert flits[30] - flits[10] == 4000
    assert flits[10] - flits[0] <= 1 and flits[40] - flits[30] <= 1  # baseline trickle at most
    assert (series[-1].nvlink_crc_data_errors, series[-1].nvlink_replay_errors) == (200, 300)
    assert {s.nvlink_links_active for s in series} == {18}


def test_a_fatal_nvlink_burst_ends_with_xid_74_and_one_link_down() -> None:
    burst = NvlinkCrcBurst(host=0, gpu=6, start_seconds=10, duration_seconds=20, fatal_link=True)
    rounds = simulate([burst], 40)
    assert xids(rounds) == [74]
    assert events(rounds)[0].ts == T0 + 30
    assert gpu_series(rounds, 6)[-1].nvlink_links_active == 17


# ---- InfiniBand --------------------------------------------------------------------------------------------


def test_symbol_error_rate_is_high_only_during_the_fault() -> None:
    fault = IbSymbolErrors(host=0, port=2, start_seconds=10, duration_seconds=30, symbol_errors_per_second=50)
    series = counter_series(simulate([fault], 60, step=5), "mlx5_2", "symbol_error")
    rates = [c.rate_per_second for c in series]
    assert rates[3:8] == [50.0] * 5  # t = 15 .. 35 s
    assert max(r or 0 for r in rates[:3] + rates[9:]) < 1


def test_link_flap_goes_down_and_back_with_link_downed_up_by_one() -> None:
    rounds = simulate([IbLinkFlap(host=0, port=4, start_seconds=10, down_seconds=6)], 30)
    states = [p.state for p in port_series(rounds, "mlx5_4")]
    assert states == ["ACTIVE"] * 10 + ["DOWN"] * 6 + ["ACTIVE"] * 15
    assert [p.phys_state for p in port_series(rounds, "mlx5_4")][10] == "Polling"
    deltas = [c.delta for c in counter_series(rounds, "mlx5_4", "link_downed")]
    assert deltas[10] == 1 and sum(d or 0 for d in deltas) == 1
    (down,) = events(rounds, EventKind.LINK_DOWN)
    assert (down.ts, down.device) == (T0 + 10, "mlx5_4")
    assert "ACTIVE -> DOWN" in down.message


def test_link_does_not_move_traffic_while_down() -> None:
    rounds = simulate([IbLinkFlap(host=0, port=4, start_seconds=10, down_seconds=6)], 30)
    deltas = [c.delta for c in counter_series(rounds, "mlx5_4", "port_xmit_data")]
    assert deltas[11:16] == [0] * 5 and all(d for d in deltas[1:10] + deltas[17:])


def test_a_flap_shorter_than_a_read_shows_only_in_link_downed() -> None:
    rounds = simulate([IbLinkFlap(host=0, port=0, start_seconds=11, down_seconds=1.5)], 30, step=5)
    assert {p.state for p in port_series(rounds, "mlx5_0")} == {"ACTIVE"}
    assert [c.delta for c in counter_series(rounds, "mlx5_0", "link_downed")][3] == 1
    (down,) = events(rounds, EventKind.LINK_DOWN)
    assert down.ts == T0 + 15 and "link_downed +1" in down.message


def test_repeated_flaps_each_count_once() -> None:
    flaps = IbLinkFlap(host=0, port=1, start_seconds=5, down_seconds=2, flaps=3, interval_seconds=10)
    rounds = simulate([flaps], 40)
    assert len(events(rounds, EventKind.LINK_DOWN)) == 3
    link_downed = counter_series(rounds, "mlx5_1", "link_downed")
    assert link_downed[-1].value - link_downed[0].value == 3


def test_a_counter_reset_reads_as_a_reset_not_a_negative_delta() -> None:
    rounds = simulate([IbCounterReset(host=0, port=3, start_seconds=10)], 20)
    series = counter_series(rounds, "mlx5_3", "port_xmit_data")
    assert series[10].reset and series[10].delta is None and series[10].rate_per_second is None
    assert series[10].value < series[9].value
    assert not any(c.reset for c in series[:10] + series[11:])
    assert all(c.delta is not None and c.delta >= 0 for c in series[11:])


# ---- thermal throttling ------------------------------------------------------------------------------------

THERMAL = ThermalThrottle(
    host=0, gpu=3, start_seconds=20, duration_seconds=120, ramp_seconds=30, peak_celsius=91
)


@pytest.fixture(scope="module")
def thermal_series() -> list[GpuSample]:
    return gpu_series(simulate([THERMAL], 300), 3)


def test_thermal_fault_heats_the_gpu_to_its_peak(thermal_series: list[GpuSample]) -> None:
    temperatures = [s.temperature_celsius or 0 for s in thermal_series]
    assert max(temperatures[:20]) < 80
    assert temperatures[50:111] == [91.0] * 61  # holding at the peak, t = 50 .. 110 s
    assert max(temperatures[250:]) < 80  # cooled back down


def test_hot_gpu_reports_hw_thermal_slowdown_with_halved_sm_clock(thermal_series: list[GpuSample]) -> None:
    hot = [s for s in thermal_series if (s.temperature_celsius or 0) >= 89]
    assert hot
    for s in hot:
        reasons = s.clocks_event_reasons or 0
        assert reasons & CLOCKS_EVENT_HW_THERMAL_SLOWDOWN and reasons & CLOCKS_EVENT_HW_SLOWDOWN
        assert reasons & CLOCKS_EVENT_SW_THERMAL_SLOWDOWN
        assert (s.sm_clock_mhz or 0) <= 990
        assert (s.power_watts or 0) < 600


def test_warm_gpu_reports_sw_thermal_slowdown_with_a_lower_sm_clock(thermal_series: list[GpuSample]) -> None:
    warm = [s for s in thermal_series if 87 <= (s.temperature_celsius or 0) < 89]
    assert warm
    for s in warm:
        assert (s.clocks_event_reasons or 0) & THERMAL_BITS == CLOCKS_EVENT_SW_THERMAL_SLOWDOWN
        assert 990 < (s.sm_clock_mhz or 0) < 1980


def test_gpu_is_not_thermally_throttled_before_or_after_the_fault(thermal_series: list[GpuSample]) -> None:
    for s in thermal_series[:20] + thermal_series[250:]:
        assert (s.clocks_event_reasons or 0) & THERMAL_BITS == 0


def test_thermal_throttling_counts_as_thermal_violation_time_and_costs_tensor_activity(
    thermal_series: list[GpuSample],
) -> None:
    throttled = sum(1 for s in thermal_series[1:] if (s.clocks_event_reasons or 0) & THERMAL_BITS)
    violation = (thermal_series[-1].violation_thermal_seconds or 0) - (
        thermal_series[0].violation_thermal_seconds or 0
    )
    assert throttled > 30 and violation == pytest.approx(throttled, abs=1.0)
    cool, hot = thermal_series[10], thermal_series[80]
    assert (hot.gpm_tensor_activity_percent or 0) < 0.6 * (cool.gpm_tensor_activity_percent or 0)


# ---- scripts ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: GpuFallOffBus(host=0, gpu=0, start_seconds=-1),
        lambda: GpuFallOffBus(host=0, gpu=0, start_seconds=float("nan")),
        lambda: EccRampThenDbe(host=0, gpu=0, start_seconds=0, ramp_seconds=0),
        lambda: EccRampThenDbe(host=0, gpu=0, start_seconds=0, corrected_errors=-1),
        lambda: XidStorm(host=0, gpu=0, start_seconds=0, events=0),
        lambda: XidStorm(host=0, gpu=0, start_seconds=0, xids=()),
        lambda: XidStorm(host=0, gpu=0, start_seconds=0, xids=(13, 999)),
        lambda: NvlinkCrcBurst(host=0, gpu=0, start_seconds=0, crc_flit_errors=-5),
        lambda: ThermalThrottle(host=0, gpu=0, start_seconds=0, duration_seconds=50, ramp_seconds=30),
        lambda: ThermalThrottle(host=0, gpu=0, start_seconds=0, peak_celsius=500),
        lambda: IbSymbolErrors(host=0, port=0, start_seconds=0, symbol_errors_per_second=-1),
        lambda: IbLinkFlap(host=0, port=0, start_seconds=0, down_seconds=0),
        lambda: IbLinkFlap(host=0, port=0, start_seconds=0, flaps=2, down_seconds=10, interval_seconds=5),
    ],
)
def test_fault_scripts_reject_nonsense_parameters(make: Callable[[], FaultScript]) -> None:
    with pytest.raises(ValueError):
        make()


def test_demo_faults_all_start_within_three_minutes() -> None:
    faults = default_demo_faults(SimulatedFleet(2, 8))
    assert len(faults) >= 7
    assert all(0 < f.start_seconds <= 180 for f in faults)


@pytest.mark.parametrize(("hosts", "gpus", "ports"), [(1, 1, 0), (1, 2, 1), (3, 4, 2), (64, 8, 8)])
def test_demo_faults_fit_any_fleet_shape(hosts: int, gpus: int, ports: int) -> None:
    shape = SimulatedFleet(hosts, gpus, ports)
    SimulatedFleet(hosts, gpus, ports, faults=default_demo_faults(shape))


def test_demo_on_2x8_shows_every_kind_of_fault_within_three_minutes() -> None:
    shape = SimulatedFleet(2, 8)
    fleet = SimulatedFleet(2, 8, seed=0, start_ts=T0, faults=default_demo_faults(shape))
    cs: list[Collector] = [
        SimulatedGpuCollector(fleet),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    rounds = []
    for t in range(0, 181):
        batch = Batch()
        for c in cs:
            batch.extend(c.collect(T0 + t))
        rounds.append(batch)
    kinds = {e.kind for e in events(rounds)}
    assert kinds == {EventKind.XID, EventKind.GPU_FALLEN_OFF_BUS, EventKind.GPU_LOST, EventKind.LINK_DOWN}
    assert {13, 31, 43, 48, 63, 79} <= set(xids(rounds))
    samples = [s for b in rounds for s in b.gpu_samples]
    assert any((s.clocks_event_reasons or 0) & CLOCKS_EVENT_HW_THERMAL_SLOWDOWN for s in samples)
    assert max(s.nvlink_crc_flit_errors or 0 for s in samples) >= 5000
    symbol_rates = [
        c.rate_per_second or 0 for b in rounds for c in b.nic_counters if c.counter == "symbol_error"
    ]
    assert max(symbol_rates) >= 10  # above the usual 10/s warning threshold


def test_kernel_lines_read_the_same_through_the_real_kernel_log_classifier() -> None:
    every_xid = XidStorm(
        host=0, gpu=4, start_seconds=0, duration_seconds=0, events=11, xids=tuple(XID_DETAILS)
    )
    faults: list[FaultScript] = [
        every_xid,
        EccRampThenDbe(host=0, gpu=2, start_seconds=0, ramp_seconds=5, remapped_rows=2),
        GpuFallOffBus(host=0, gpu=7, start_seconds=3),
    ]
    logged = [e for e in events(simulate(faults, 10)) if e.kind != EventKind.GPU_LOST]
    assert len(logged) == len(XID_DETAILS) + 4 + 2  # every XID, 2 + 1 row remaps and a DBE, 2 fall-off lines
    for event in logged:
        fault = classify_kernel_message(event.message)
        assert fault is not None, event.message
        got = (fault.kind, fault.code, fault.pci_bus_id, fault.pid, fault.process_name)
        assert got == (event.kind, event.code, event.pci_bus_id, event.pid, event.process_name), event.message


def test_demo_faults_never_make_a_counter_go_down() -> None:
    shape = SimulatedFleet(2, 8)
    fleet = SimulatedFleet(2, 8, seed=4, start_ts=T0, faults=default_demo_faults(shape))
    gpu, nic = SimulatedGpuCollector(fleet), SimulatedNicCollector(fleet)
    last_gpu: dict[tuple[str, int], GpuSample] = {}
    for t in range(0, 241, 3):
        for s in gpu.collect(T0 + t).gpu_samples:
            before = last_gpu.get((s.host, s.gpu_index))
            if before is not None:
                for field in CUMULATIVE_GPU_FIELDS:
                    assert getattr(s, field) >= getattr(before, field), (s.host, s.gpu_index, field)
            last_gpu[(s.host, s.gpu_index)] = s
        assert not any(c.reset or (c.delta or 0) < 0 for c in nic.collect(T0 + t).nic_counters)
