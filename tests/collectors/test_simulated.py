"""The simulated fleet as a data source: its shape, its identity, its clock and its healthy baseline."""

from __future__ import annotations

import re
import statistics

import pytest

from collectors.protocol import Collector
from collectors.simulated import (
    GpuFallOffBus,
    SimulatedFleet,
    SimulatedGpuCollector,
    SimulatedKmsgCollector,
    SimulatedNicCollector,
    XidStorm,
    default_demo_faults,
    parse_fleet_spec,
)
from fleetguard.records.telemetry import Batch, GpuSample, NicCounterSample

T0 = 1_700_000_000.0


def collectors(
    fleet: SimulatedFleet,
) -> list[SimulatedGpuCollector | SimulatedNicCollector | SimulatedKmsgCollector]:
    return [SimulatedGpuCollector(fleet), SimulatedNicCollector(fleet), SimulatedKmsgCollector(fleet)]


def run(fleet: SimulatedFleet, times: list[float]) -> list[Batch]:
    """One merged batch per `now`, from a GPU, a NIC and a kmsg collector over the same fleet."""
    cs = collectors(fleet)
    rounds = []
    for now in times:
        batch = Batch()
        for c in cs:
            batch.extend(c.collect(now))
        rounds.append(batch)
    return rounds


def every(seconds: float, step: float, start: float = T0) -> list[float]:
    return [start + i * step for i in range(int(seconds / step) + 1)]


def gpu_series(rounds: list[Batch], host: str, gpu: int) -> list[GpuSample]:
    return [s for b in rounds for s in b.gpu_samples if s.host == host and s.gpu_index == gpu]


def counter_series(rounds: list[Batch], counter: str) -> dict[tuple[str, str], list[NicCounterSample]]:
    series: dict[tuple[str, str], list[NicCounterSample]] = {}
    for b in rounds:
        for c in b.nic_counters:
            if c.counter == counter:
                series.setdefault((c.host, c.device), []).append(c)
    return series


# ---- fleet spec --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"), [("4x8", (4, 8)), (" 2X16 ", (2, 16)), ("4096x16", (4096, 16))]
)
def test_parse_fleet_spec_reads_hosts_by_gpus(spec: str, expected: tuple[int, int]) -> None:
    assert parse_fleet_spec(spec) == expected


@pytest.mark.parametrize(
    "spec", ["", "x", "4x", "x8", "4x8x2", "4*8", "-1x8", "4x8 extra", "four x eight", "٤x8"]
)
def test_parse_fleet_spec_rejects_text_that_is_not_hosts_by_gpus(spec: str) -> None:
    with pytest.raises(ValueError, match="HOSTSxGPUS"):
        parse_fleet_spec(spec)


@pytest.mark.parametrize("spec", ["0x8", "4x0", "4097x8", "4x17", "1000000x8", "9" * 5000 + "x8"])
def test_parse_fleet_spec_rejects_empty_and_oversized_fleets(spec: str) -> None:
    with pytest.raises(ValueError, match=r"4096|16"):
        parse_fleet_spec(spec)


# ---- shape and identity ------------------------------------------------------------------------------------


def test_fleet_names_its_hosts_sim_host_nnn() -> None:
    assert SimulatedFleet(3, 1).host_names == ["sim-host-000", "sim-host-001", "sim-host-002"]


@pytest.mark.parametrize(
    ("hosts", "gpus", "ports"), [(0, 8, 8), (4097, 8, 8), (1, 0, 8), (1, 17, 8), (1, 8, -1), (1, 8, 17)]
)
def test_fleet_rejects_sizes_out_of_range(hosts: int, gpus: int, ports: int) -> None:
    with pytest.raises(ValueError, match="simulated"):
        SimulatedFleet(hosts, gpus, ports)


def test_fleet_rejects_a_fault_on_a_gpu_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="gpu 8 is not on the host"):
        SimulatedFleet(1, 8, faults=[GpuFallOffBus(host=0, gpu=8, start_seconds=1)])


def test_fleet_rejects_a_fault_on_a_host_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="host 2 is not in the fleet"):
        SimulatedFleet(2, 8, faults=[XidStorm(host=2, gpu=0, start_seconds=1)])


def test_gpu_uuids_are_stable_for_a_seed() -> None:
    first = run(SimulatedFleet(2, 8, seed=5), [T0])[0].gpu_samples
    again = run(SimulatedFleet(2, 8, seed=5), [T0])[0].gpu_samples
    other = run(SimulatedFleet(2, 8, seed=6), [T0])[0].gpu_samples
    uuids = [s.uuid for s in first]
    assert uuids == [s.uuid for s in again]
    assert not set(uuids) & {s.uuid for s in other}
    assert len(set(uuids)) == 16
    assert all(
        re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in uuids
    )


def test_gpus_look_like_h100s_on_an_hgx_board() -> None:
    samples = run(SimulatedFleet(1, 8), [T0])[0].gpu_samples
    assert {s.name for s in samples} == {"NVIDIA H100 80GB HBM3"}
    assert {s.memory_total_bytes for s in samples} == {81_559 * 1024 * 1024}
    bus_ids = [s.pci_bus_id for s in samples]
    assert len(set(bus_ids)) == 8
    assert all(b is not None and re.fullmatch(r"0000:[0-9a-f]{2}:00\.0", b) for b in bus_ids)
    assert all(s.driver_version and re.fullmatch(r"\d+\.\d+\.\d+", s.driver_version) for s in samples)
    assert all(s.serial and s.serial.isdigit() and len(s.serial) == 13 for s in samples)


def test_ports_are_mlx5_0_to_7_at_400_gbps_infiniband() -> None:
    ports = run(SimulatedFleet(1, 8), [T0])[0].nic_samples
    assert [p.device for p in ports] == [f"mlx5_{i}" for i in range(8)]
    assert {(p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports} == {
        (1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
    }


def test_ports_expose_ibta_and_mlx5_counter_groups() -> None:
    counters = run(SimulatedFleet(1, 1, ports_per_host=1), [T0])[0].nic_counters
    groups = {c.counter: c.group for c in counters}
    assert groups["port_xmit_data"] == groups["symbol_error"] == groups["link_downed"] == "counters"
    assert groups["local_ack_timeout_err"] == groups["out_of_sequence"] == "hw_counters"


# ---- protocol and clock ------------------------------------------------------------------------------------


def test_collectors_satisfy_the_collector_protocol() -> None:
    cs = collectors(SimulatedFleet(1, 1))
    assert all(isinstance(c, Collector) for c in cs)
    assert len({c.name for c in cs}) == 3


def test_same_seed_and_times_give_identical_records() -> None:
    times = [T0 + t for t in (0, 1, 2, 3.5, 7, 7.25, 30, 31, 95, 140, 141, 175, 180, 240)]

    def records() -> list[Batch]:
        shape = SimulatedFleet(2, 8, seed=11)
        return run(SimulatedFleet(2, 8, seed=11, faults=default_demo_faults(shape)), times)

    first, second = records(), records()
    assert first == second
    assert sum(len(b.events) for b in first) > 0  # the faults ran too


def test_different_seeds_give_different_readings() -> None:
    a = run(SimulatedFleet(1, 8, seed=1), every(10, 1))
    b = run(SimulatedFleet(1, 8, seed=2), every(10, 1))
    assert [s.power_watts for s in a[-1].gpu_samples] != [s.power_watts for s in b[-1].gpu_samples]


def test_readings_do_not_depend_on_which_collector_reads_first() -> None:
    times = every(60, 5)
    fleet_a, fleet_b = SimulatedFleet(1, 8, seed=3), SimulatedFleet(1, 8, seed=3)
    gpu_a, nic_a = SimulatedGpuCollector(fleet_a), SimulatedNicCollector(fleet_a)
    gpu_b, nic_b = SimulatedGpuCollector(fleet_b), SimulatedNicCollector(fleet_b)
    for now in times:
        gpus_a, ports_a = gpu_a.collect(now), nic_a.collect(now)
        ports_b, gpus_b = nic_b.collect(now), gpu_b.collect(now)
        assert gpus_a == gpus_b and ports_a == ports_b


def test_records_are_stamped_with_the_given_now() -> None:
    storm = XidStorm(host=0, gpu=0, start_seconds=0, duration_seconds=5, events=4)
    rounds = run(SimulatedFleet(1, 2, faults=[storm]), [T0, T0 + 2.5])
    for now, batch in zip([T0, T0 + 2.5], rounds, strict=True):
        assert batch.events
        stamps = {s.ts for s in batch.gpu_samples} | {p.ts for p in batch.nic_samples}
        stamps |= {c.ts for c in batch.nic_counters} | {e.ts for e in batch.events}
        assert stamps == {now}


def test_a_repeated_now_reads_the_same_state_with_zero_deltas() -> None:
    fleet = SimulatedFleet(1, 2, ports_per_host=1)
    gpu, nic = SimulatedGpuCollector(fleet), SimulatedNicCollector(fleet)
    gpu.collect(T0), nic.collect(T0)
    first, first_ports = gpu.collect(T0 + 1), nic.collect(T0 + 1)
    again, again_ports = gpu.collect(T0 + 1), nic.collect(T0 + 1)
    assert again.gpu_samples == first.gpu_samples
    assert {c.delta for c in again_ports.nic_counters} == {0}
    assert {c.rate_per_second for c in again_ports.nic_counters} == {None}
    assert first_ports.nic_counters[0].delta


def test_a_clock_going_backwards_is_counted_and_simulates_nothing() -> None:
    fleet = SimulatedFleet(1, 2)
    gpu = SimulatedGpuCollector(fleet)
    gpu.collect(T0 + 10)
    before = gpu.collect(T0 + 10).gpu_samples
    after = gpu.collect(T0 + 5).gpu_samples
    assert gpu.problems() == {"clock_went_backwards": 1}
    assert [s.energy_joules for s in after] == [s.energy_joules for s in before]
    assert {s.ts for s in after} == {T0 + 5}


@pytest.mark.parametrize("now", [float("nan"), float("inf")])
def test_a_non_finite_now_is_counted_and_yields_nothing(now: float) -> None:
    nic = SimulatedNicCollector(SimulatedFleet(1, 1))
    assert len(nic.collect(now)) == 0
    assert nic.problems() == {"invalid_time": 1}


def test_fault_times_count_from_the_first_now_when_no_start_is_given() -> None:
    fleet = SimulatedFleet(1, 1, faults=[XidStorm(host=0, gpu=0, start_seconds=10, events=1)])
    kmsg = SimulatedKmsgCollector(fleet)
    assert kmsg.collect(T0 + 500).events == []
    assert kmsg.collect(T0 + 509.9).events == []
    assert [e.ts for e in kmsg.collect(T0 + 510).events] == [T0 + 510]


def test_faults_already_due_at_the_first_read_are_applied_then() -> None:
    fleet = SimulatedFleet(1, 1, start_ts=T0, faults=[GpuFallOffBus(host=0, gpu=0, start_seconds=30)])
    events = SimulatedKmsgCollector(fleet).collect(T0 + 3600).events
    assert [e.code for e in events] == [79, None]


# ---- healthy baseline --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def healthy_rounds() -> list[Batch]:
    """Half an hour of a 4x8 fleet training with no faults, read every 5 s."""
    return run(SimulatedFleet(4, 8, seed=7), every(1800, 5))


def test_training_gpus_report_plausible_readings(healthy_rounds: list[Batch]) -> None:
    samples = [s for b in healthy_rounds for s in b.gpu_samples]
    assert len(samples) == 32 * len(healthy_rounds)
    for s in samples:
        assert s.utilization_gpu_percent is not None and 85 <= s.utilization_gpu_percent <= 100
        assert s.memory_used_bytes is not None and 65e9 <= s.memory_used_bytes <= 80e9
        assert s.temperature_celsius is not None and 45 <= s.temperature_celsius <= 82
        assert s.power_watts is not None and 450 <= s.power_watts <= 700
        assert (s.sm_clock_mhz, s.memory_clock_mhz, s.performance_state) in {(1980, 2619, 0)} or (
            s.clocks_event_reasons == 0x4  # SW power cap trims the SM clock a little
        )
        assert (s.pcie_link_gen, s.pcie_link_width, s.nvlink_links_active) == (5, 16, 18)
        assert (s.retired_pages_sbe, s.retired_pages_dbe, s.retired_pages_pending) == (None, None, None)
        assert s.ecc_uncorrected_volatile == 0 and s.remapped_rows_pending is False


def test_temperature_follows_power(healthy_rounds: list[Batch]) -> None:
    samples = [s for b in healthy_rounds[60:] for s in b.gpu_samples]
    temperatures = [float(s.temperature_celsius or 0) for s in samples]
    powers = [float(s.power_watts or 0) for s in samples]
    assert statistics.correlation(powers, temperatures) > 0.5


def test_energy_grows_by_power_times_time(healthy_rounds: list[Batch]) -> None:
    series = gpu_series(healthy_rounds, "sim-host-001", 3)
    energy = (series[-1].energy_joules or 0) - (series[0].energy_joules or 0)
    mean_power = statistics.fmean(s.power_watts or 0 for s in series[1:])
    assert energy == pytest.approx(mean_power * (series[-1].ts - series[0].ts), rel=0.02)


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


def test_gpu_counters_never_decrease(healthy_rounds: list[Batch]) -> None:
    for host in ("sim-host-000", "sim-host-003"):
        for gpu in range(8):
            series = gpu_series(healthy_rounds, host, gpu)
            for field in CUMULATIVE_GPU_FIELDS:
                values = [getattr(s, field) for s in series]
                assert values == sorted(values), (host, gpu, field)


def test_port_counters_never_decrease_and_deltas_are_differences(healthy_rounds: list[Batch]) -> None:
    samples = [c for b in healthy_rounds for c in b.nic_counters]
    previous: dict[tuple[str, str, str], int] = {}
    for c in samples:
        key = (c.host, c.device, c.counter)
        assert not c.reset
        if key in previous:
            assert c.delta == c.value - previous[key] >= 0
            assert c.rate_per_second == pytest.approx(c.delta / 5.0)
        else:
            assert c.delta is None and c.rate_per_second is None
        previous[key] = c.value


def test_port_traffic_runs_at_a_realistic_share_of_400_gbps(healthy_rounds: list[Batch]) -> None:
    for name in ("port_xmit_data", "port_rcv_data"):
        for series in counter_series(healthy_rounds, name).values():
            for c in series[1:]:
                bits_per_second = (c.rate_per_second or 0) * 4 * 8  # the counter is in 4-octet units
                assert 0.1 * 400e9 <= bits_per_second <= 400e9


def test_a_healthy_fleet_raises_no_events(healthy_rounds: list[Batch]) -> None:
    assert [e for b in healthy_rounds for e in b.events] == []


# ---- what a real H100 would add: GPM, the cadence of slow fields, the processes on each GPU ----------------


def test_training_gpus_report_plausible_gpm_metrics(healthy_rounds: list[Batch]) -> None:
    for s in (s for b in healthy_rounds for s in b.gpu_samples):
        util = s.utilization_gpu_percent or 0.0
        assert s.gpm_sm_activity_percent is not None and 0.8 * util <= s.gpm_sm_activity_percent <= util
        assert s.gpm_sm_occupancy_percent is not None and 35 <= s.gpm_sm_occupancy_percent <= 55
        assert s.gpm_tensor_activity_percent is not None
        assert 0 < s.gpm_tensor_activity_percent < s.gpm_sm_activity_percent
        assert s.gpm_dram_bandwidth_percent is not None and 20 <= s.gpm_dram_bandwidth_percent <= 70
        assert s.nvlink_tx_bytes_per_second is not None and 100e9 <= s.nvlink_tx_bytes_per_second <= 180e9
        assert s.pcie_tx_bytes_per_second is not None and s.pcie_tx_bytes_per_second > 0


def test_slow_fields_follow_the_same_cadence_as_on_a_real_gpu(healthy_rounds: list[Batch]) -> None:
    # Read every 5 s with the default 30 s slow interval: GPU 0 re-reads at 0, 30, 60 ..., GPU 4 of 8 half an
    # interval later (45, 75 ...): a host's slow reads are spread, not all in one round.
    gpu0 = gpu_series(healthy_rounds, "sim-host-000", 0)
    gpu4 = gpu_series(healthy_rounds, "sim-host-000", 4)
    assert [s.slow_read_ts for s in gpu0[:8]] == [T0] * 6 + [T0 + 30] * 2
    assert [s.slow_read_ts for s in gpu4[:11]] == [T0] * 9 + [T0 + 45] * 2
    assert all(s.slow_read_ts is not None and s.ts - 50 <= s.slow_read_ts <= s.ts for s in gpu0 + gpu4)


def test_each_gpu_names_its_training_process() -> None:
    fleet = SimulatedFleet(2, 4, seed=3)
    gpu = SimulatedGpuCollector(fleet)
    gpu.collect(T0)
    processes = gpu.gpu_processes()
    assert len(processes) == 8
    by_uuid = {p.uuid: p.pids for h in fleet.hosts for g in h.gpus for p in processes if p.uuid == g.uuid}
    assert by_uuid == {g.uuid: (g.pid,) for h in fleet.hosts for g in h.gpus}


def test_collect_once_prints_a_table_for_a_person_not_dict_reprs() -> None:
    from click.testing import CliRunner

    from fleetguard.cli import cli

    result = CliRunner().invoke(cli, ["collect", "--once", "--simulate", "1x2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split()[:3] == ["collector", "gpu", "samples"]
    gpu_row = next(line for line in lines if line.startswith("simulated_gpu"))
    assert gpu_row.split()[1] == "2"
    assert "{" not in result.output and "'" not in result.output, result.output
