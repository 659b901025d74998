"""The RDMA collector against sysfs trees built in temporary folders: ports, counters, bad files, links."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

import pytest

from collectors.protocol import Collector, CollectorUnavailable
from collectors.rdma import DATA_COUNTER_BYTES, RdmaCollector, data_counter_bytes
from collectors.sysfs_ib import (
    BadValue,
    parse_counter,
    parse_rate_gbps,
    parse_state,
    read_failure_reason,
)
from fleetguard.records.telemetry import Batch, EventKind, NicCounterSample, NicSample
from tests.fixtures.sysfs.ib_tree import (
    H100_DEVICES,
    IB_COUNTERS,
    MLX5_HW_COUNTERS,
    h100_host,
    roce_port,
    set_value,
    write_port,
)

HOST = "gpu-node-017"
T0 = 1_700_000_000.0
running_as_root = os.geteuid() == 0
NOBODY = 65534


def counter(batch: Batch, name: str, device: str = "mlx5_0") -> NicCounterSample:
    (row,) = [c for c in batch.nic_counters if c.counter == name and c.device == device]
    return row


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---- ports -------------------------------------------------------------------------------------------------


def test_an_h100_host_has_eight_active_400g_infiniband_ports(tmp_path: Path) -> None:
    h100_host(tmp_path)
    batch = RdmaCollector(HOST, sysfs_root=str(tmp_path)).collect(T0)
    assert batch.nic_samples == [
        NicSample(T0, HOST, device, 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand") for device in H100_DEVICES
    ]


def test_every_counter_file_of_every_port_becomes_a_counter_row(tmp_path: Path) -> None:
    h100_host(tmp_path)
    batch = RdmaCollector(HOST, sysfs_root=str(tmp_path)).collect(T0)
    per_port = len(IB_COUNTERS) + len(MLX5_HW_COUNTERS)
    assert len(batch.nic_counters) == 8 * per_port
    mlx5_3 = {(c.group, c.counter) for c in batch.nic_counters if c.device == "mlx5_3"}
    assert mlx5_3 == {("counters", n) for n in IB_COUNTERS} | {("hw_counters", n) for n in MLX5_HW_COUNTERS}


def test_hw_counters_lifespan_is_a_setting_not_a_counter(tmp_path: Path) -> None:
    h100_host(tmp_path)
    batch = RdmaCollector(HOST, sysfs_root=str(tmp_path)).collect(T0)
    assert not [c for c in batch.nic_counters if c.counter == "lifespan"]


def test_a_roce_port_reports_its_ethernet_link_layer(tmp_path: Path) -> None:
    roce_port(tmp_path)
    batch = RdmaCollector(HOST, sysfs_root=str(tmp_path)).collect(T0)
    assert batch.nic_samples == [NicSample(T0, HOST, "mlx5_bond_0", 1, "ACTIVE", "LinkUp", 200.0, "Ethernet")]


def test_a_port_without_hw_counters_reports_its_ibta_counters(tmp_path: Path) -> None:
    write_port(tmp_path, "mlx4_0", 2, hw_counters=None, rate="56 Gb/sec (4X FDR)")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    batch = collector.collect(T0)
    assert {c.group for c in batch.nic_counters} == {"counters"}
    assert batch.nic_samples[0].rate_gbps == 56.0
    assert collector.problems() == {}


def test_ports_of_a_multi_port_device_are_each_reported(tmp_path: Path) -> None:
    write_port(tmp_path, "mlx5_0", 1)
    write_port(tmp_path, "mlx5_0", 2, state="1: DOWN", phys_state="3: Disabled")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert collector.ports == [("mlx5_0", 1), ("mlx5_0", 2)]
    assert [(s.port, s.state) for s in collector.collect(T0).nic_samples] == [(1, "ACTIVE"), (2, "DOWN")]


def test_the_collector_implements_the_collector_protocol(tmp_path: Path) -> None:
    h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert isinstance(collector, Collector)
    assert collector.name == "rdma"


# ---- deltas, rates, resets ---------------------------------------------------------------------------------


def test_the_first_reading_has_no_delta(tmp_path: Path) -> None:
    h100_host(tmp_path, values={"symbol_error": 12})
    row = counter(RdmaCollector(HOST, sysfs_root=str(tmp_path)).collect(T0), "symbol_error")
    assert (row.value, row.delta, row.rate_per_second, row.reset) == (12, None, None, False)


def test_a_counter_increase_gives_the_exact_delta_and_rate(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"symbol_error": 12})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "symbol_error", 42)
    row = counter(collector.collect(T0 + 10), "symbol_error")
    assert row == NicCounterSample(T0 + 10, HOST, "mlx5_0", 1, "symbol_error", "counters", 42, 30, 3.0)


def test_a_hw_counter_increase_gives_the_exact_delta_and_rate(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"local_ack_timeout_err": 1})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "local_ack_timeout_err", 6, group="hw_counters")
    row = counter(collector.collect(T0 + 2), "local_ack_timeout_err")
    assert (row.group, row.value, row.delta, row.rate_per_second) == ("hw_counters", 6, 5, 2.5)


def test_port_data_counters_keep_their_raw_four_octet_units(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"port_xmit_data": 1_000})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "port_xmit_data", 1_000 + 12_500_000_000)  # one second at 400 Gb/s line rate
    row = counter(collector.collect(T0 + 1), "port_xmit_data")
    assert row.rate_per_second == 12_500_000_000.0
    assert data_counter_bytes(int(row.rate_per_second)) == 50_000_000_000 == 400e9 / 8
    assert DATA_COUNTER_BYTES == 4


def test_a_counter_that_goes_down_is_a_reset_not_a_negative_rate(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"port_rcv_errors": 900})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "port_rcv_errors", 4)
    row = counter(collector.collect(T0 + 1), "port_rcv_errors")
    assert (row.value, row.delta, row.rate_per_second, row.reset) == (4, None, None, True)
    set_value(port, "port_rcv_errors", 9)
    after = counter(collector.collect(T0 + 2), "port_rcv_errors")
    assert (after.delta, after.rate_per_second, after.reset) == (5, 5.0, False)


def test_a_value_of_u64_max_is_read_exactly(tmp_path: Path) -> None:
    h100_host(tmp_path, values={"port_rcv_data": 2**64 - 1})
    row = counter(RdmaCollector(HOST, sysfs_root=str(tmp_path)).collect(T0), "port_rcv_data")
    assert row.value == 2**64 - 1


def test_values_are_read_fresh_each_round_without_kept_files(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=0)
    collector.collect(T0)
    set_value(port, "link_error_recovery", 3)
    assert counter(collector.collect(T0 + 60), "link_error_recovery").rate_per_second == 0.05


# ---- files that cannot be used -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("abc\n", "garbage_value"),
        ("", "garbage_value"),
        ("-5\n", "garbage_value"),
        ("1_000\n", "garbage_value"),
        ("N/A (no PMA)\n", "garbage_value"),
        ("7" * 10_000, "value_out_of_range"),
        ("x" * 10_000, "garbage_value"),
        (f"{2**64}\n", "value_out_of_range"),
    ],
)
def test_a_garbage_counter_file_is_counted_and_skipped(tmp_path: Path, content: str, reason: str) -> None:
    (port, *_) = h100_host(tmp_path)
    set_value(port, "symbol_error", content)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    batch = collector.collect(T0)
    assert not [c for c in batch.nic_counters if c.device == "mlx5_0" and c.counter == "symbol_error"]
    assert len(batch.nic_counters) == 8 * (len(IB_COUNTERS) + len(MLX5_HW_COUNTERS)) - 1
    assert collector.problems() == {reason: 1}


def test_a_counter_that_turns_to_garbage_and_back_is_measured_across_the_gap(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"symbol_error": 10})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "symbol_error", "garbage\n")
    collector.collect(T0 + 1)
    set_value(port, "symbol_error", 16)
    assert counter(collector.collect(T0 + 2), "symbol_error").delta == 6


def _collect_as_nobody(sysfs_root: Path) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """One collection round in a forked child that, when we are root (as in CI), first drops to uid 65534:
    root reads a chmod 000 file anyway, so only another user meets the kernel's refusal."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            if running_as_root:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            collector = RdmaCollector(HOST, sysfs_root=str(sysfs_root))
            rows = [(c.device, c.counter) for c in collector.collect(T0).nic_counters]
            os.write(write_end, json.dumps([rows, collector.problems()]).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        out = answer.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    rows, problems = json.loads(out)
    return [(device, name) for device, name in rows], problems


def test_an_unreadable_counter_file_is_counted_as_permission_denied() -> None:
    # Not tmp_path: pytest's base folder is 0700 to root, so uid 65534 could not reach anything under it.
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        root = Path(folder)
        root.chmod(0o755)
        (port, *_) = h100_host(root)
        (port / "counters" / "symbol_error").chmod(0)
        rows, problems = _collect_as_nobody(root)
    assert ("mlx5_0", "symbol_error") not in rows
    assert ("mlx5_0", "port_rcv_data") in rows  # the refusal cost one counter, not the port
    assert problems == {"permission_denied": 1}


def test_a_read_refused_by_permissions_is_counted_each_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root ignores chmod 000, so the refusal is scripted: this is what open() answers a user without access.
    h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=0)
    real_open = os.open

    def open_refusing_symbol_error(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == "symbol_error":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_refusing_symbol_error)
    for i in range(2):
        batch = collector.collect(T0 + i)
        assert not [c for c in batch.nic_counters if c.counter == "symbol_error"]
    assert collector.problems() == {"permission_denied": 16}


def test_a_folder_in_place_of_a_counter_file_is_counted_and_skipped(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    (port / "counters" / "symbol_error").unlink()
    (port / "counters" / "symbol_error").mkdir()
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    batch = collector.collect(T0)
    assert not [c for c in batch.nic_counters if c.device == "mlx5_0" and c.counter == "symbol_error"]
    assert collector.problems() == {"not_a_file": 1}


def test_a_dangling_link_in_place_of_a_counter_file_is_counted_and_skipped(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    (port / "hw_counters" / "out_of_buffer").unlink()
    (port / "hw_counters" / "out_of_buffer").symlink_to(tmp_path / "nowhere")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert len(collector.collect(T0).nic_counters) == 8 * (len(IB_COUNTERS) + len(MLX5_HW_COUNTERS)) - 1
    assert collector.problems() == {"not_a_file": 1}


def test_a_link_loop_in_counters_drops_only_that_counter(tmp_path: Path) -> None:
    """os.scandir's is_file() raises ELOOP for a link to itself: today the whole counters/ group was lost."""
    (port, *_) = h100_host(tmp_path)
    (port / "counters" / "loop").symlink_to(port / "counters" / "loop")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    batch = collector.collect(T0)
    assert len(batch.nic_counters) == 8 * (len(IB_COUNTERS) + len(MLX5_HW_COUNTERS))
    assert counter(batch, "symbol_error").group == "counters"
    assert collector.problems() == {"not_a_file": 1}


def test_a_counter_jumping_by_2_to_the_63_or_more_is_a_counted_reset_not_a_delta_the_store_refuses(
    tmp_path: Path,
) -> None:
    """0 -> 2**64-1 gave a delta past BIGINT: the store refused the batch and retried it row by row."""
    (port, *_) = h100_host(tmp_path, values={"port_xmit_data": 0})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "port_xmit_data", 2**64 - 1)
    row = counter(collector.collect(T0 + 1), "port_xmit_data")
    assert (row.value, row.delta, row.rate_per_second, row.reset) == (2**64 - 1, None, None, True)
    assert collector.problems() == {"counter_jump": 1}
    set_value(port, "port_xmit_data", 2**64 - 1)
    assert counter(collector.collect(T0 + 2), "port_xmit_data").delta == 0


@pytest.mark.timeout(20)
def test_a_fifo_in_place_of_a_counter_file_never_blocks_a_round(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    os.mkfifo(port / "hw_counters" / "fifo_at_scan")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=0)
    collector.collect(T0)
    (port / "counters" / "symbol_error").unlink()
    os.mkfifo(port / "counters" / "symbol_error")  # after the scan: opened at read time
    batch = collector.collect(T0 + 1)
    assert not [c for c in batch.nic_counters if c.device == "mlx5_0" and c.counter == "symbol_error"]
    assert collector.problems() == {"not_a_file": 1, "garbage_value": 1}


def test_a_file_that_turns_into_a_folder_between_rounds_is_counted_at_read(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=0)
    collector.collect(T0)
    (port / "counters" / "symbol_error").unlink()
    (port / "counters" / "symbol_error").mkdir()
    collector.collect(T0 + 1)
    assert collector.problems() == {"not_a_file": 1}


def test_a_counter_file_that_vanishes_is_counted_and_the_ports_are_scanned_again(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=0)
    collector.collect(T0)
    (port / "counters" / "VL15_dropped").unlink()

    collector.collect(T0 + 1)
    assert collector.problems() == {"vanished": 1}

    batch = collector.collect(T0 + 2)  # scanned again: the file is no longer listed
    assert not [c for c in batch.nic_counters if c.counter == "VL15_dropped" and c.device == "mlx5_0"]
    assert collector.problems() == {"vanished": 1}


def test_a_port_without_a_rate_file_reports_no_rate(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    (port / "rate").unlink()
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert collector.collect(T0).nic_samples[0].rate_gbps is None
    assert collector.problems() == {}


def test_a_garbage_port_state_is_none_and_counted(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    (port / "state").write_text("\x00\x01\x02")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    sample = collector.collect(T0).nic_samples[0]
    assert (sample.state, sample.phys_state) == (None, "LinkUp")
    assert collector.problems() == {"garbage_value": 1}


def test_a_port_folder_that_is_not_a_number_is_counted_and_skipped(tmp_path: Path) -> None:
    h100_host(tmp_path)
    (tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "lost+found").mkdir()
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert len(collector.collect(T0).nic_samples) == 8
    assert collector.problems() == {"garbage_port": 1}


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (errno.EACCES, "permission_denied"),
        (errno.EPERM, "permission_denied"),
        (errno.ENOENT, "vanished"),
        (errno.ENODEV, "vanished"),
        (errno.EISDIR, "not_a_file"),
        (errno.EIO, "io_error"),
        (errno.EINVAL, "read_error"),
        (errno.EOPNOTSUPP, "read_error"),
    ],
)
def test_read_failures_are_named_by_errno(error: int, reason: str) -> None:
    assert read_failure_reason(OSError(error, os.strerror(error))) == reason


# ---- link events -------------------------------------------------------------------------------------------


def test_a_port_leaving_active_gives_one_link_down_event(tmp_path: Path) -> None:
    ports = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert collector.collect(T0).events == []

    set_value(ports[4], "state", "1: DOWN\n", group="")
    set_value(ports[4], "phys_state", "2: Polling\n", group="")
    batch = collector.collect(T0 + 1)

    (event,) = batch.events
    assert (event.kind, event.source, event.device, event.host, event.ts) == (
        EventKind.LINK_DOWN,
        "rdma",
        "mlx5_4",
        HOST,
        T0 + 1,
    )
    assert event.message == "mlx5_4 port 1: state ACTIVE -> DOWN (phys_state Polling)"
    assert collector.collect(T0 + 2).events == []  # still down: no new event


def test_a_port_that_was_down_from_the_start_gives_no_event(tmp_path: Path) -> None:
    write_port(tmp_path, "mlx5_0", state="1: DOWN", phys_state="3: Disabled")
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    assert collector.collect(T0).events == []
    assert collector.collect(T0 + 1).events == []


def test_link_downed_rising_gives_a_link_down_event(tmp_path: Path) -> None:
    ports = h100_host(tmp_path, values={"link_downed": 2})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(ports[7], "link_downed", 3)
    (event,) = collector.collect(T0 + 1).events
    assert (event.kind, event.device) == (EventKind.LINK_DOWN, "mlx5_7")
    assert "link_downed +1" in event.message


def test_a_link_downed_reset_is_not_a_link_down_event(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"link_downed": 5})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "link_downed", 0)
    assert collector.collect(T0 + 1).events == []


def test_going_down_with_link_downed_rising_in_one_round_is_one_event(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "state", "1: DOWN\n", group="")
    set_value(port, "link_downed", 1)
    (event,) = collector.collect(T0 + 1).events
    assert event.message == "mlx5_0 port 1: state ACTIVE -> DOWN (phys_state LinkUp), link_downed +1"


# ---- no devices, rescans, descriptors ----------------------------------------------------------------------


def test_a_host_without_class_infiniband_makes_the_collector_unavailable(tmp_path: Path) -> None:
    with pytest.raises(CollectorUnavailable) as raised:
        RdmaCollector(HOST, sysfs_root=str(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"no RDMA devices: {tmp_path}/class/infiniband does not exist")
    assert "collectors.rdma = false" in message
    assert "\n" not in message


def test_an_empty_class_infiniband_makes_the_collector_unavailable(tmp_path: Path) -> None:
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    with pytest.raises(CollectorUnavailable, match="no RDMA ports"):
        RdmaCollector(HOST, sysfs_root=str(tmp_path))


def test_allow_empty_collects_nothing_until_a_device_appears(tmp_path: Path) -> None:
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), allow_empty=True, rescan_seconds=60)
    assert len(collector.collect(T0)) == 0
    write_port(tmp_path, "mlx5_0")
    assert len(collector.collect(T0 + 30)) == 0
    assert len(collector.collect(T0 + 60).nic_samples) == 1
    assert collector.problems() == {}


def test_a_new_counter_file_is_picked_up_at_the_next_rescan(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), rescan_seconds=300)
    collector.collect(T0)
    set_value(port, "roce_adp_retrans_new", 1, group="hw_counters")
    assert not [c for c in collector.collect(T0 + 299).nic_counters if c.counter == "roce_adp_retrans_new"]
    assert counter(collector.collect(T0 + 300), "roce_adp_retrans_new").value == 1


def test_counters_keep_their_history_across_a_rescan(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path, values={"symbol_error": 1})
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), rescan_seconds=10)
    collector.collect(T0)
    set_value(port, "symbol_error", 4)
    assert counter(collector.collect(T0 + 10), "symbol_error").delta == 3


def test_a_clock_stepped_back_rescans_and_reports_no_rate(tmp_path: Path) -> None:
    (port, *_) = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path))
    collector.collect(T0)
    set_value(port, "symbol_error", 2)
    row = counter(collector.collect(T0 - 5), "symbol_error")
    assert (row.delta, row.rate_per_second) == (2, None)


def test_no_more_than_max_open_files_are_kept_open_and_close_releases_them(tmp_path: Path) -> None:
    h100_host(tmp_path)
    before = open_fds()
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=100)
    collector.collect(T0)
    directories = 8 * 3  # each port, its counters/ and its hw_counters/
    assert open_fds() - before == 100 + directories
    collector.close()
    assert open_fds() == before


def test_files_beyond_the_open_file_budget_are_read_as_well(tmp_path: Path) -> None:
    ports = h100_host(tmp_path)
    collector = RdmaCollector(HOST, sysfs_root=str(tmp_path), max_open_files=10)
    collector.collect(T0)
    set_value(ports[7], "rnr_nak_retry_err", 4, group="hw_counters")
    assert counter(collector.collect(T0 + 1), "rnr_nak_retry_err", device="mlx5_7").delta == 4


# ---- parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "state"),
    [
        (b"4: ACTIVE\n", "ACTIVE"),
        (b"1: DOWN\n", "DOWN"),
        (b"5: LinkUp\n", "LinkUp"),
        (b"4: PortConfigurationTraining\n", "PortConfigurationTraining"),
        (b"7: Phy Test\n", "Phy Test"),
        (b"ACTIVE", "ACTIVE"),
    ],
)
def test_parse_state_drops_the_number(text: bytes, state: str) -> None:
    assert parse_state(text) == state


@pytest.mark.parametrize("text", [b"", b"4: ", b"4: \xff\xfe", b"4: ACTIVE; rm -rf", b"4: " + b"A" * 100])
def test_parse_state_rejects_garbage(text: bytes) -> None:
    with pytest.raises(BadValue):
        parse_state(text)


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        (b"400 Gb/sec (4X NDR)\n", 400.0),
        (b"200 Gb/sec (4X HDR)\n", 200.0),
        (b"2.5 Gb/sec (1X SDR)\n", 2.5),
        (b"56 Gb/sec (4X FDR)", 56.0),
    ],
)
def test_parse_rate_reads_gigabits_per_second(text: bytes, gbps: float) -> None:
    assert parse_rate_gbps(text) == gbps


@pytest.mark.parametrize("text", [b"", b"400", b"fast Gb/sec", b"nan Gb/sec", b"inf Gb/sec", b"-1 Gb/sec"])
def test_parse_rate_rejects_garbage(text: bytes) -> None:
    with pytest.raises(BadValue):
        parse_rate_gbps(text)


def test_parse_counter_reads_a_decimal_line() -> None:
    assert parse_counter(b"18446744073709551615\n") == 2**64 - 1
