"""Flight-recorder dumps: real and PyTorch-shaped dumps become CollectiveProgress; hostile pickles run
nothing."""

from __future__ import annotations

import os
import pickle
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.flight_recorder import (
    FlightRecorderError,
    load_dump,
    load_dump_bytes,
    progress_from_dump,
    rank_from_path,
    read_dump_dir,
)
from fleetguard.records.runtime import CollectiveProgress

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nccl"
TS = 1_800_000_000.0


def entry(
    pg_id: int,
    seq: int,
    op: str,
    state: str,
    sizes: list[list[int]],
    pg_name: str = "0",
    pg_desc: str = "default_pg",
    is_p2p: bool = False,
) -> dict[str, Any]:
    """One entry with every key FlightRecorderDetail.hpp (dump version 2.10) writes."""
    return {
        "frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 3245}],
        "record_id": seq,
        "pg_id": pg_id,
        "process_group": (pg_name, pg_desc),
        "thread_name": "pt_main_thread",
        "thread_id": "140245",
        "collective_seq_id": 0 if is_p2p else seq,
        "p2p_seq_id": seq if is_p2p else 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": 1_795_334_250_393_481_070 + seq,
        "duration_ms": 1.5,
        "input_sizes": sizes,
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": sizes,
        "output_dtypes": ["Float"] * len(sizes),
        "state": state,
        "time_discovered_started_ns": None if state == "scheduled" else 1,
        "time_discovered_completed_ns": 2 if state == "completed" else None,
        "retired": state == "completed",
        "timeout_ms": 600_000,
        "is_p2p": is_p2p,
    }


def nccl_dump(rank_stuck_at: int = 7) -> dict[str, Any]:
    """A rank of an 8-GPU job whose all_reduce number `rank_stuck_at` started and never completed."""
    entries = [entry(0, s, "nccl:all_reduce", "completed", [[262144]]) for s in range(1, rank_stuck_at)]
    entries.append(entry(0, rank_stuck_at, "nccl:all_reduce", "started", [[262144]]))
    entries.append(entry(1, 3, "nccl:all_gather", "completed", [[1024, 4]], pg_name="1", pg_desc="tp_group"))
    entries.append(
        entry(1, 4, "nccl:send 0->1", "scheduled", [[8]], pg_name="1", pg_desc="tp_group", is_p2p=True)
    )
    return {
        "version": "2.10",
        "comm_lib_version": "2.21.5",
        "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"},
            "1": {"name": "1", "desc": "tp_group", "ranks": "[0, 1]"},
        },
        "pg_status": {
            "0": {
                "last_enqueued_collective": rank_stuck_at,
                "last_started_collective": rank_stuck_at,
                "last_completed_collective": rank_stuck_at - 1,
            },
            "1": {
                "last_enqueued_collective": 3,
                "last_started_collective": 3,
                "last_completed_collective": 3,
            },
        },
        "entries": entries,
    }


def test_real_dump_written_by_pytorch() -> None:
    dump = load_dump(FIXTURES / "nccl_trace_rank_0")
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS)
    assert progress == [
        CollectiveProgress(TS, "h", "j", 0, "0", 2, -1, 2, "gloo:broadcast", 4096, "flight_recorder"),
        CollectiveProgress(TS, "h", "j", 0, "1", 2, -1, 2, "gloo:all_gather", 16, "flight_recorder"),
    ]


def test_nccl_shaped_dump_gives_progress_per_process_group() -> None:
    progress = progress_from_dump(nccl_dump(rank_stuck_at=7), host="h", job_id="j", rank=3, ts=TS)
    assert [
        (p.process_group, p.last_enqueued, p.last_started, p.last_completed, p.op, p.size) for p in progress
    ] == [
        ("0", 7, 7, 6, "nccl:all_reduce", 262144),
        ("1", 3, 3, 3, "nccl:all_gather", 4096),
    ]
    assert {(p.rank, p.host, p.job_id, p.source) for p in progress} == {(3, "h", "j", "flight_recorder")}


def test_dump_file_round_trip_in_the_pickle_protocol_pytorch_writes(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_5"
    path.write_bytes(pickle.dumps(nccl_dump(), protocol=2))
    assert load_dump(path) == nccl_dump()


def test_last_enqueued_entry_already_rotated_out_has_no_op_or_size() -> None:
    dump = nccl_dump()
    dump["pg_status"]["0"]["last_enqueued_collective"] = 99
    (first, _) = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS)
    assert (first.last_enqueued, first.op, first.size) == (99, None, None)


def test_collective_without_tensors_has_no_size() -> None:
    dump = nccl_dump()
    dump["entries"][-3]["input_sizes"] = []  # a barrier-like collective
    (first, _) = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS)
    assert first.size is None


def test_dump_without_pg_status_is_derived_from_entry_states() -> None:
    dump = nccl_dump(rank_stuck_at=7)
    del dump["pg_status"]
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS)
    assert [(p.process_group, p.last_enqueued, p.last_started, p.last_completed) for p in progress] == [
        ("0", 7, 7, 6),
        ("1", 3, 3, 3),
    ]


def test_malformed_parts_of_a_dump_are_skipped() -> None:
    dump = nccl_dump()
    dump["pg_status"]["2"] = {"last_enqueued_collective": "seven"}
    dump["pg_status"]["3"] = ["not", "a", "dict"]
    dump["entries"].append("not an entry")
    dump["entries"].append({"pg_id": 0, "collective_seq_id": 7, "input_sizes": [["x"]]})
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS)
    assert [p.process_group for p in progress] == ["0", "1"]


def test_a_sequence_number_past_bigint_drops_its_group_and_is_counted() -> None:
    """A dump saying 10**30 made a row the store refused, and the agent retried its batch row by row."""
    dump = nccl_dump()
    dump["pg_status"]["1"]["last_started_collective"] = 10**30
    problems: Counter[str] = Counter()
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS, problems=problems)
    assert [p.process_group for p in progress] == ["0"]
    assert problems == Counter({"value_out_of_range": 1})


def test_entry_sequence_numbers_past_bigint_are_skipped_and_counted() -> None:
    dump = nccl_dump(rank_stuck_at=7)
    del dump["pg_status"]
    dump["entries"].append(entry(0, 10**30, "nccl:all_reduce", "completed", [[8]]))
    problems: Counter[str] = Counter()
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS, problems=problems)
    assert [(p.process_group, p.last_enqueued) for p in progress] == [("0", 7), ("1", 3)]
    assert problems["value_out_of_range"] == 1


def test_a_size_past_bigint_is_none_and_counted_without_multiplying_huge_numbers() -> None:
    dump = nccl_dump(rank_stuck_at=7)
    dump["entries"][6]["input_sizes"] = [[2**62, 4, *([10**300] * 10_000)]]  # all_reduce number 7
    problems: Counter[str] = Counter()
    (first, _) = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS, problems=problems)
    assert (first.last_enqueued, first.op, first.size) == (7, "nccl:all_reduce", None)
    assert problems["value_out_of_range"] == 1


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_every_stored_sequence_number_fits_bigint(seq: int) -> None:
    dump = nccl_dump()
    dump["pg_status"]["0"]["last_enqueued_collective"] = seq
    for p in progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS):
        assert -(2**63) <= p.last_enqueued <= 2**63 - 1


def test_rank_comes_from_the_file_name() -> None:
    assert rank_from_path("/tmp/nccl_trace_rank_12") == 12
    assert rank_from_path("/tmp/nccl_trace_rank_x") is None
    assert rank_from_path("/tmp/other_3") is None
    assert rank_from_path("/dumps/job_trace_7", prefix="job_trace_") == 7


def test_directory_of_dumps_gives_every_rank_and_lists_bad_files(tmp_path: Path) -> None:
    for rank in range(4):
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(nccl_dump(7 if rank != 2 else 9), 2))
    (tmp_path / "nccl_trace_rank_4").write_bytes(b"garbage")
    (tmp_path / "unrelated.txt").write_text("x")
    report = read_dump_dir(tmp_path, host="h", job_id="j", ts=TS)
    default_pg = [p for p in report.progress if p.process_group == "0"]
    assert [(p.rank, p.last_completed) for p in default_pg] == [(0, 6), (1, 6), (2, 8), (3, 6)]
    assert list(report.errors) == [str(tmp_path / "nccl_trace_rank_4")]
    assert "not a readable pickle" in report.errors[str(tmp_path / "nccl_trace_rank_4")]


def test_missing_directory_is_reported_not_raised(tmp_path: Path) -> None:
    report = read_dump_dir(tmp_path / "nope", host="h", job_id="j", ts=TS)
    assert report.progress == []
    assert "cannot list" in report.errors[str(tmp_path / "nope")]


def test_dump_over_the_size_limit_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(nccl_dump(), 2))
    with pytest.raises(FlightRecorderError, match="over the 100-byte limit"):
        load_dump(path, max_bytes=100)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not a readable pickle"),
        (b"\x80\x02}q\x00(X\x07\x00\x00\x00version", "not a readable pickle"),  # truncated
        (b"not a pickle at all", "not a readable pickle"),
        (pickle.dumps([1, 2, 3], 2), "not a flight-recorder dump"),
        (pickle.dumps({"version": "2.10"}, 2), "not a flight-recorder dump"),
    ],
)
def test_unusable_bytes_are_a_clear_error(data: bytes, reason: str) -> None:
    with pytest.raises(FlightRecorderError, match=reason):
        load_dump_bytes(data)


def test_unreadable_file_is_a_flight_recorder_error(tmp_path: Path) -> None:
    with pytest.raises(FlightRecorderError, match="cannot read"):
        load_dump(tmp_path / "nccl_trace_rank_0")


class _MakesDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


class _RunsShell:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (subprocess.call, (["touch", str(self.path)],))


class _Evals:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, (f"open({str(self.path)!r}, 'w').close()",))


@pytest.mark.parametrize("payload", [_MakesDirectory, _RunsShell, _Evals])
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_hostile_pickle_is_refused_and_runs_nothing(
    tmp_path: Path, payload: type[Any], protocol: int
) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps(payload(marker), protocol=protocol)
    with pytest.raises(FlightRecorderError, match="refusing to load"):
        load_dump_bytes(data)
    assert not marker.exists()


def test_hostile_object_hidden_inside_a_real_looking_dump_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    dump = nccl_dump()
    dump["entries"][3]["frames"] = [_MakesDirectory(marker)]
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump, protocol=2))
    with pytest.raises(FlightRecorderError, match=r"nccl_trace_rank_0: refusing to load posix\.mkdir"):
        load_dump(path)
    assert not marker.exists()


def test_hostile_dump_in_a_directory_does_not_stop_the_others(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(nccl_dump(), 2))
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(_RunsShell(marker), 2))
    report = read_dump_dir(tmp_path, host="h", job_id="j", ts=TS)
    assert {p.rank for p in report.progress} == {0}
    assert "refusing to load" in report.errors[str(tmp_path / "nccl_trace_rank_1")]
    assert not marker.exists()


def test_load_dump_follows_no_link_and_reads_nothing_but_a_regular_file(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(pickle.dumps(nccl_dump(), protocol=2))
    (tmp_path / "nccl_trace_rank_0").symlink_to(real)
    os.mkfifo(tmp_path / "nccl_trace_rank_1")  # opening it for reading would block without O_NONBLOCK
    with pytest.raises(FlightRecorderError):
        load_dump(tmp_path / "nccl_trace_rank_0")
    with pytest.raises(FlightRecorderError, match="not a regular file"):
        load_dump(tmp_path / "nccl_trace_rank_1")


# A dump is written by the job's user (root's jobs are credited only root's dumps); whatever it holds, its
# strings must be ones a VARCHAR column holds, and reading it must cost what a real dump costs.


def test_names_no_column_can_hold_are_skipped_and_counted() -> None:
    dump = nccl_dump()
    dump["entries"][0]["process_group"] = ("pg\ud800", "desc")  # pickle keeps lone surrogates
    dump["entries"][-2]["profiling_name"] = "x" * 100_000
    problems: Counter[str] = Counter()
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS, problems=problems)
    assert [(p.process_group, p.op) for p in progress] == [("0", "nccl:all_reduce"), ("1", None)]
    assert problems["bad_name"] == 2
    for p in progress:  # every string can be written as UTF-8
        (p.process_group + (p.op or "")).encode("utf-8")


def test_a_group_id_past_str_conversion_limits_is_skipped_not_raised() -> None:
    dump = nccl_dump()
    dump["pg_status"][10**5000] = dump["pg_status"]["1"]  # str() of it raises ValueError
    dump["pg_status"]["g\udfff"] = dump["pg_status"]["1"]
    problems: Counter[str] = Counter()
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS, problems=problems)
    assert [p.process_group for p in progress] == ["0", "1"] and problems["bad_name"] == 2


def test_a_dump_with_a_hundred_thousand_groups_is_bounded_and_linear() -> None:
    dump = nccl_dump()
    for g in range(2, 100_002):
        dump["pg_status"][str(g)] = dict(dump["pg_status"]["1"])
        dump["entries"].append(entry(g, 3, "nccl:all_gather", "completed", [[4]], pg_name=str(g)))
    problems: Counter[str] = Counter()
    progress = progress_from_dump(dump, host="h", job_id="j", rank=0, ts=TS, problems=problems)
    assert len(progress) == 256 and progress[0].process_group == "0"
    assert problems["groups_over_limit"] == 100_002 - 256


@pytest.mark.parametrize("put", [b"r" + (600_000_000).to_bytes(4, "little"), b"p600000000\n"])
def test_a_memo_index_no_dump_could_hold_is_refused_before_the_unpickler_grows_its_memo(put: bytes) -> None:
    """The C unpickler grows its memo array to twice the largest index it is told to store at, zeroed: one
    flipped byte of a real dump made it take ~10 GB (the fuzz test found it, 31 s). The index is refused
    from the opcodes alone, before anything is built."""
    import resource

    bomb = b"\x80\x02}" + put + b"."  # PROTO 2, EMPTY_DICT, LONG_BINPUT / PUT at 600 M, STOP
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(FlightRecorderError, match="memo index 600000000"):
        load_dump_bytes(bomb)
    # Refused, not allocated: the process's peak did not grow by the 9.6 GB the memo would take.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kib < 512 * 1024
    assert load_dump_bytes((FIXTURES / "nccl_trace_rank_0").read_bytes())["entries"]  # real indices pass
