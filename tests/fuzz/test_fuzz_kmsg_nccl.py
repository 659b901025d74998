"""Fuzzing every kernel-log, NCCL-log, sysfs and flight-recorder parser: no input makes an exception escape,
and every number they produce fits the store column it lands in."""

from __future__ import annotations

import pickle
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.counter_delta import CounterTracker
from collectors.flight_recorder import FlightRecorderError, load_dump_bytes, progress_from_dump
from collectors.kmsg import KmsgCollector, KmsgFileCollector, kernel_event
from collectors.kmsg_classify import classify_kernel_message, normalise_pci_bus_id
from collectors.kmsg_parse import KernelLine, Unparsed, parse_kernel_line
from collectors.nccl import NcclLogCollector, nccl_event
from collectors.nccl_parse import classify_nccl_line, parse_nccl_line
from collectors.sysfs_ib import BadValue, parse_counter
from fleetguard.records.bounds import SqlType, fits
from fleetguard.records.telemetry import NicCounterSample
from fleetguard.store.schema import TABLE_BY_RECORD

FIXTURES = Path(__file__).parents[1] / "fixtures"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Fragments of real lines, so that generated text reaches deep into the patterns instead of failing at once.
_FRAGMENTS = [
    "4,3964,206764307,-;",
    "4,99999999999999999999,206764307,-;",
    "4,9223372036854775808,1,-;",
    "4,9223372036854775807,1,-;",
    "6,1,2,c;",
    " SUBSYSTEM=pci",
    "[  227.996636] ",
    "[Sun Feb 23 16:24:18 2025] ",
    "kern  :warn  : ",
    "2025-01-21T04:41:44,285060+00:00 ",
    "NVRM: Xid (PCI:0000:9b:00): ",
    "119, ",
    "pid=2024380, name=nvidia-smi, ",
    "pid='<unknown>', name=<unknown>, ",
    "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, ",
    "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.",
    "pcieport 0000:00:01.0: AER: ",
    "Multiple Uncorrected (Fatal) error received: 0000:01:00.0",
    "Correctable error message received from ",
    "mlx5_core 0000:5c:00.0 ens1f0: ",
    "insufficient power",
    "High Temperature",
    "python[12345]: segfault at 0 ip 00007f sp 00007ff error 4 in libnccl.so.2[7f+1f]",
    "traps: pt_main_thread[4242] general protection fault ",
    " in libcuda.so.1[",
    "gpu-node-07:3468:3905 [4] transport/net_ib.cc:1696 NCCL WARN ",
    "NET/IB : Got completion from peer 10.0.0.7<54862> with status=12 opcode=0",
    " hca mlx5_1",
    "NET/IB : mlx5_1:1 async fatal event on QP (0x1): x",
    "Call to ibv_modify_qp failed with error 110",
    "Call to recv from 10.0.0.8<58355> failed : Broken pipe",
    "[rank4]: ",
    "unhandled system error",
    "remote process exited or there was a network error",
    "Watchdog caught collective operation timeout",
    "[2025-11-09 07:39:30] ",
    "\x00",
    "\udcff",
    "\n",
    "é",
    ";",
    ",",
    "[",
    "]",
    ":",
    "<unknown>",
]
lines = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=8)), max_size=12).map("".join),
)


@FUZZ
@given(lines)
def test_parse_kernel_line_accepts_any_text(text: str) -> None:
    result = parse_kernel_line(text)
    assert result is None or isinstance(result, KernelLine | Unparsed)
    if isinstance(result, KernelLine):
        assert (result.ts is None) != (result.uptime_seconds is None)
        assert result.seq is None or fits(SqlType.BIGINT, result.seq)  # the events.seq column


@FUZZ
@given(lines)
def test_classify_kernel_message_accepts_any_text(text: str) -> None:
    fault = classify_kernel_message(text)
    if fault is not None and fault.pci_bus_id is not None:
        assert normalise_pci_bus_id(fault.pci_bus_id) == fault.pci_bus_id


@FUZZ
@given(lines, st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)))
def test_kernel_event_accepts_any_line(text: str, boot_time: float | None) -> None:
    line = parse_kernel_line(text)
    if isinstance(line, KernelLine):
        event = kernel_event(line, "h", 1_800_000_000.0, boot_time)
        assert event is None or event.host == "h"


@pytest.mark.parametrize("year", ["0000", "0001", "9999"])
@pytest.mark.parametrize("hours", [-14, 0, 14, None])
def test_timestamps_at_the_ends_of_the_calendar(year: str, hours: int | None) -> None:
    tz = None if hours is None else timezone(timedelta(hours=hours))
    for text in (
        f"[Mon Jan 01 00:00:00 {year}] x",
        f"[Fri Dec 31 23:59:59 {year}] x",
        f"{year}-01-01T00:00:00+14:00 x",
        f"{year}-12-31T23:59:59-14:00 x",
    ):
        assert isinstance(parse_kernel_line(text, tz), KernelLine | Unparsed)
    for stamp in (f"{year}-01-01 00:00:00", f"{year}-12-31 23:59:59"):
        parse_nccl_line(f"[{stamp}] h:1:2 [0] NCCL WARN x", tz)


@FUZZ
@given(st.text(max_size=40))
def test_normalise_pci_bus_id_accepts_any_text(text: str) -> None:
    result = normalise_pci_bus_id(text)
    assert result is None or normalise_pci_bus_id(result) == result


@FUZZ
@given(lines)
def test_nccl_parsing_accepts_any_text(text: str) -> None:
    classify_nccl_line(parse_nccl_line(text))
    event = nccl_event(text, "h", 1_800_000_000.0, "f.log")
    assert event is None or event.kind == "nccl_error"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    [
        "AER:" + "x" * 100_000,
        "pcieport 0000:00:01.0: AER: " * 3000,
        "NVRM: GPU " * 10_000,
        "python[1]: segfault at " * 5000 + " in libnccl",
        "a" * 100_000 + ":1:2 [0] NCCL WARN x",
        "NET/IB : Got completion from peer " + "1" * 100_000,
        "Call to recv " + "x" * 100_000 + " failed",
    ],
)
def test_adversarial_long_lines_finish(text: str) -> None:
    classify_kernel_message(text)
    parse_kernel_line(text)
    nccl_event(text, "h", 0.0)


@FUZZ
@given(st.binary(max_size=2000))
def test_kmsg_file_collector_never_raises_and_counts_every_bad_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "kmsg.txt"
    path.write_bytes(data)
    collector = KmsgFileCollector("h", str(path))
    batch = collector.collect(1_800_000_000.0)
    assert all(e.host == "h" for e in batch.events)
    assert all(count > 0 for count in collector.problems().values())


@FUZZ
@given(st.lists(st.text(alphabet="abcdefghij XYZ", min_size=1, max_size=30), min_size=1, max_size=30))
def test_lines_in_no_form_are_each_counted_once(tmp_path: Path, words: list[str]) -> None:
    garbage = [w for w in words if w.strip() and w[0] != " "]
    path = tmp_path / "kmsg.txt"
    path.write_text("".join(w + "\n" for w in words))
    collector = KmsgFileCollector("h", str(path))
    assert collector.collect(0.0).events == []
    assert collector.problems().get("unknown_format", 0) == len(garbage)


@FUZZ
@given(st.binary(max_size=2000))
def test_kmsg_collector_never_raises(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(data)
    collector = KmsgCollector("h", str(path), boot_time=0.0, boot_id_path=str(tmp_path / "none"))
    for event in collector.collect(1_800_000_000.0).events:
        assert storable(event)
    collector.close()


@FUZZ
@given(st.binary(max_size=2000))
def test_nccl_collector_never_raises(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(data)
    NcclLogCollector("h", [str(path)]).collect(0.0)


@FUZZ
@given(st.binary(max_size=500))
def test_load_dump_bytes_raises_only_flight_recorder_errors(data: bytes) -> None:
    try:
        dump = load_dump_bytes(data)
    except FlightRecorderError:
        return
    assert isinstance(dump, dict)


_REAL_DUMP = (FIXTURES / "nccl" / "nccl_trace_rank_0").read_bytes()


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(_REAL_DUMP) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_corrupted_real_dump_raises_only_flight_recorder_errors(flips: list[tuple[int, int]]) -> None:
    data = bytearray(_REAL_DUMP)
    for index, value in flips:
        data[index] = value
    try:
        dump = load_dump_bytes(bytes(data))
    except FlightRecorderError:
        return
    progress_from_dump(dump, host="h", job_id="j", rank=0, ts=0.0)


_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(
            st.sampled_from(
                [
                    "pg_id",
                    "collective_seq_id",
                    "profiling_name",
                    "input_sizes",
                    "state",
                    "is_p2p",
                    "process_group",
                    "last_enqueued_collective",
                    "last_started_collective",
                    "last_completed_collective",
                    "0",
                    "1",
                ]
            ),
            children,
            max_size=6,
        ),
    ),
    max_leaves=30,
)


@FUZZ
@given(st.dictionaries(st.sampled_from(["version", "entries", "pg_status", "pg_config"]), _plain))
def test_progress_from_any_plain_data_never_raises(dump: dict[str, Any]) -> None:
    data = pickle.dumps(dump, protocol=2)
    try:
        loaded = load_dump_bytes(data)
    except FlightRecorderError:
        return
    for record in progress_from_dump(loaded, host="h", job_id="j", rank=0, ts=0.0):
        assert isinstance(record.last_enqueued, int)
        assert storable(record)


@FUZZ
@given(st.binary(max_size=64))
def test_sysfs_counter_values_fit_their_column_or_are_refused(data: bytes) -> None:
    try:
        value = parse_counter(data)
    except BadValue:
        return
    assert fits(SqlType.UBIGINT, value)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.floats(0, 1e6)), min_size=2, max_size=10))
def test_rdma_counter_rows_always_fit_the_store(readings: list[tuple[int, float]]) -> None:
    tracker: CounterTracker[str] = CounterTracker()
    ts = 0.0
    for value, step in readings:
        ts += step
        change = tracker.update("x", value, ts)
        row = NicCounterSample(ts, "h", "mlx5_0", 1, "port_xmit_data", "counters", value, change.delta)
        assert storable(row)


def storable(record: object) -> bool:
    """Every int field of `record` fits the column it lands in (fleetguard.store.schema)."""
    table = TABLE_BY_RECORD[type(record)]
    return all(
        fits(SqlType(c.sql_type), getattr(record, c.name))
        for c in table.columns
        if c.sql_type in ("BIGINT", "UBIGINT") and getattr(record, c.name) is not None
    )
