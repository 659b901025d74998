"""localise_hang: each hang kind, missing reports, and the earliest-blocked group as the root cause."""

from __future__ import annotations

import json

from collectors.flight_recorder import progress_from_dump
from fleetguard.records.runtime import CollectiveProgress
from straggler.hang import HangDiagnosis, hang_finding, localise_hang


def cp(
    rank: int,
    enq: int,
    started: int,
    completed: int,
    group: str = "0",
    ts: float = 100.0,
    op: str | None = "nccl:all_reduce",
    size: int | None = 1024,
) -> CollectiveProgress:
    return CollectiveProgress(
        ts=ts,
        host=f"h{rank}",
        job_id="j",
        rank=rank,
        process_group=group,
        last_enqueued=enq,
        last_started=started,
        last_completed=completed,
        op=op,
        size=size,
    )


def diag(progress: list[CollectiveProgress], members: dict[str, list[int]] | None = None) -> HangDiagnosis:
    d = localise_hang(progress, members)
    assert d is not None
    return d


def test_all_ranks_completed_is_not_a_hang() -> None:
    assert localise_hang([cp(r, 10, 10, 10) for r in range(4)]) is None


def test_no_progress_at_all_is_not_a_diagnosis() -> None:
    assert localise_hang([]) is None


def test_rank_that_never_enqueued_is_host_stuck() -> None:
    d = diag([cp(0, 10, 10, 9), cp(1, 10, 10, 9), cp(2, 9, 9, 9), cp(3, 10, 10, 9)])
    assert (d.kind, d.suspect_ranks, d.process_group) == ("host_stuck", (2,), "0")


def test_enqueued_but_not_started_is_a_blocked_gpu_stream_and_evicts_hardware() -> None:
    d = diag([cp(0, 10, 10, 9), cp(1, 10, 9, 9), cp(2, 10, 10, 9), cp(3, 10, 10, 9)])
    assert (d.kind, d.suspect_ranks, d.evict_hardware) == ("gpu_stream_blocked", (1,), True)


def test_all_started_none_completed_is_network() -> None:
    d = diag([cp(r, 10, 10, 9) for r in range(4)])
    assert (d.kind, d.suspect_ranks, d.evict_hardware) == ("network", (0, 1, 2, 3), False)


def test_same_sequence_with_different_op_is_a_program_bug_without_eviction() -> None:
    d = diag([cp(0, 10, 10, 9), cp(1, 10, 10, 9, op="nccl:all_gather"), cp(2, 10, 10, 9), cp(3, 10, 10, 9)])
    assert (d.kind, d.suspect_ranks, d.evict_hardware) == ("collective_mismatch", (1,), False)


def test_same_sequence_with_different_size_is_a_program_bug() -> None:
    d = diag([cp(0, 10, 10, 9, size=4096), cp(1, 10, 10, 9), cp(2, 10, 10, 9), cp(3, 10, 10, 9)])
    assert (d.kind, d.suspect_ranks) == ("collective_mismatch", (0,))


def test_member_with_no_report_is_a_suspect() -> None:
    d = diag([cp(0, 10, 10, 9), cp(1, 10, 10, 9), cp(3, 10, 10, 9)], members={"0": [0, 1, 2, 3]})
    assert (d.kind, d.suspect_ranks) == ("host_stuck", (2,))
    assert d.evidence["missing_ranks"] == [2]


def test_group_with_no_reports_at_all_names_all_its_members() -> None:
    d = diag([cp(0, 5, 5, 5, group="tp")], members={"tp": [0], "dp": [0, 1]})
    assert (d.process_group, d.suspect_ranks) == ("dp", (0, 1))


def test_latest_report_of_a_rank_counts() -> None:
    d = diag([cp(2, 9, 9, 9, ts=50.0), cp(2, 10, 10, 9, ts=90.0), cp(0, 10, 10, 9), cp(1, 10, 9, 9)])
    assert (d.kind, d.suspect_ranks) == ("gpu_stream_blocked", (1,))


def test_earliest_blocked_group_holds_the_root_cause() -> None:
    # dp stopped moving at t=40 (rank 1's GPU blocked); tp groups blocked later, waiting on it
    progress = [
        cp(0, 7, 7, 6, group="dp", ts=40.0),
        cp(1, 7, 6, 6, group="dp", ts=39.0),
        cp(0, 20, 20, 19, group="tp0", ts=60.0),
        cp(2, 20, 20, 19, group="tp0", ts=61.0),
    ]
    d = diag(progress)
    assert (d.process_group, d.kind, d.suspect_ranks) == ("dp", "gpu_stream_blocked", (1,))
    assert set(d.evidence["blocked_groups"]) == {"dp", "tp0"}  # type: ignore[call-overload]


def test_group_blocked_only_because_its_suspect_waits_in_another_group_is_a_consequence() -> None:
    # rank 2 never enqueued in tp (host_stuck there) because it is waiting inside dp, whose network is stuck
    progress = [
        cp(0, 30, 30, 29, group="tp", ts=10.0),
        cp(2, 29, 29, 29, group="tp", ts=5.0),
        cp(2, 8, 8, 7, group="dp", ts=20.0),
        cp(3, 8, 8, 7, group="dp", ts=20.0),
    ]
    d = diag(progress)
    assert (d.process_group, d.kind) == ("dp", "network")


def test_hang_finding_names_kind_suspects_and_host() -> None:
    d = diag([cp(0, 10, 10, 9), cp(1, 10, 9, 9)])
    f = hang_finding(d, "j", now=123.0)
    ev = json.loads(f.evidence_json)
    assert (f.kind, f.severity, f.rank, f.host) == ("hang_localised", "critical", 1, "h1")
    assert (ev["hang_kind"], ev["suspect_ranks"], ev["evict_hardware"]) == ("gpu_stream_blocked", [1], True)


def _dump(enqueued: int, started: int, completed: int, op: str = "nccl:all_reduce") -> dict[str, object]:
    """A rank's flight-recorder dump as PyTorch shapes it (plain containers), one process group "0"."""
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": enqueued,
                "last_started_collective": started,
                "last_completed_collective": completed,
            }
        },
        "entries": [
            {
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "collective_seq_id": enqueued,
                "profiling_name": op,
                "input_sizes": [[1024]],
                "state": "scheduled",
            }
        ],
    }


def test_flight_recorder_dumps_localise_a_mismatched_collective() -> None:
    dumps = {
        0: _dump(10, 10, 9),
        1: _dump(10, 10, 9),
        2: _dump(10, 10, 9, op="nccl:all_gather"),
        3: _dump(10, 10, 9),
    }
    progress = [
        p for r, d in dumps.items() for p in progress_from_dump(d, host=f"h{r}", job_id="j", rank=r, ts=5.0)
    ]
    d = diag(progress, members={"0": [0, 1, 2, 3]})
    assert (d.kind, d.suspect_ranks, d.evict_hardware) == ("collective_mismatch", (2,), False)


def test_flight_recorder_dumps_with_one_rank_missing_name_it() -> None:
    progress = [
        p
        for r in (0, 1, 3)
        for p in progress_from_dump(_dump(10, 10, 9), host="h", job_id="j", rank=r, ts=5.0)
    ]
    d = diag(progress, members={"0": [0, 1, 2, 3]})
    assert (d.kind, d.suspect_ranks) == ("host_stuck", (2,))


def test_a_report_far_ahead_of_its_group_is_left_out_and_its_rank_is_the_missing_member() -> None:
    # One rank claims a sequence number orders of magnitude past the others', which would make every other
    # rank "behind" (host stuck): its report is no evidence, so it is the missing member instead.
    progress = [cp(0, 10**15, 10**15, 10**15), cp(1, 1000, 1000, 999), cp(2, 1000, 1000, 999)]
    d = diag(progress, {"0": [0, 1, 2]})
    assert (d.kind, d.suspect_ranks) == ("host_stuck", (0,))
    assert d.evidence["implausible_ranks"] == {"0": [0]}
