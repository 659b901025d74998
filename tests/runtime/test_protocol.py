"""Report parsing: valid reports become records; anything else is a ReportError naming the field."""

from __future__ import annotations

import pytest

from fleetguard.runtime.protocol import MAX_REPORT_BYTES, ReportError, parse_report
from tests.runtime.helpers import JOB, report_body


def test_a_valid_report_becomes_heartbeat_timing_and_progress_records() -> None:
    report = parse_report(report_body(), host="agent", received_ts=100.0, owner_uid=0)
    assert (report.heartbeat.job_id, report.heartbeat.rank, report.heartbeat.pid) == (JOB, 1, 999)
    assert report.heartbeat.ts == 100.0  # stamped on the agent's clock
    assert report.heartbeat.host == "agent"  # the agent's name for its host, not the client's
    assert report.timings[0].duration_seconds == 0.25
    assert report.collectives[0].last_completed == 8


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (report_body(rank=-1), "rank"),
        (report_body(rank=True), "rank"),
        (report_body(pid="12"), "pid"),
        (report_body(job_id=""), "job_id"),
        (report_body(job_id="--all"), "job_id"),  # would be an option to scancel in {job}
        (report_body(job_id="a b;rm"), "job_id"),
        (report_body(status="exploded"), "status"),
        (report_body(status=[]), "status"),  # found by tests/fuzz/test_fuzz_report.py: was a TypeError
        (report_body(timings=[[1.0, 2, "compute"]]), "timings[0]"),
        (report_body(timings=[[1.0, 2, "compute", float("nan")]]), "timings[0].duration"),
        (report_body(timings=[[1.0, 2, "compute", -1.0]]), "timings[0].duration"),
        (report_body(collectives="world"), "collectives"),
        (report_body(rank=4), "rank"),  # world_size is 4
        (report_body(local_rank=2), "local_rank"),  # more than its global rank
        (report_body(local_world_size=5), "local_world_size"),
        (report_body(timings=[[1.0, 2, "compute", 0.1]] * 8193), "timings"),
        (report_body(collectives=[["g", 1.0, 1, 1, 1, None, None]] * 257), "collectives"),
        (report_body(timings=[[1e300, 2, "compute", 0.1]]), "timings[0].ts"),
        (report_body(timings=[[-5.0, 2, "compute", 0.1]]), "timings[0].ts"),
        (report_body(collectives=[["g", float("inf"), 1, 1, 1, None, None]]), "collectives[0].ts"),
        (b'{"job_id": "j", ' + b'"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
    ],
)
def test_bad_reports_are_rejected_with_the_field_named(body: bytes, field: str) -> None:
    with pytest.raises(ReportError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_report(body, host="agent", received_ts=1.0, owner_uid=0)


def test_a_report_over_the_size_limit_is_rejected() -> None:
    with pytest.raises(ReportError, match="bytes"):
        parse_report(b" " * (MAX_REPORT_BYTES + 1), host="agent", received_ts=1.0, owner_uid=0)


def test_a_report_names_the_global_ranks_on_its_host_from_torchruns_local_world_size() -> None:
    body = report_body(rank=13, local_rank=5, world_size=16, local_world_size=8)
    assert parse_report(body, "agent", 0.0, owner_uid=0).local_ranks() == range(8, 16)
    alone = report_body(rank=13, local_rank=5, world_size=16)
    assert parse_report(alone, "agent", 0.0, owner_uid=0).local_ranks() == range(13, 14)
    with pytest.raises(ReportError, match="local_world_size"):
        parse_report(report_body(local_world_size=0), "agent", 0.0, owner_uid=0)


def test_acknowledged_command_ids_are_parsed_and_checked() -> None:
    assert parse_report(report_body(acked=["job-a:checkpoint:1"]), "agent", 0.0, owner_uid=0).acked == (
        "job-a:checkpoint:1",
    )
    with pytest.raises(ReportError, match=r"acked\[0\]"):
        parse_report(report_body(acked=[7]), "agent", 0.0, owner_uid=0)


INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"step": 10**20}, "step"),
        ({"step": -(2**63) - 1}, "step"),
        ({"pid": 2**64}, "pid"),
        ({"rank": 2**63, "world_size": 2**63}, "rank"),
        ({"world_size": 10**30}, "world_size"),
        ({"local_world_size": 2**70}, "local_world_size"),
        ({"checkpoint_step": 2**63}, "checkpoint_step"),
        ({"dropped_timings": 2**64 + 5}, "dropped_timings"),
        ({"timings": [[1.0, 10**20, "compute", 0.1]]}, "timings[0].step"),
        ({"timings": [[1.0, 1, "compute", 10**400]]}, "timings[0].duration"),
        ({"collectives": [["g", 1.0, 10**30, 1, 1, None, None]]}, "collectives[0].enqueued"),
        ({"collectives": [["g", 1.0, 1, 10**30, 1, None, None]]}, "collectives[0].started"),
        ({"collectives": [["g", 1.0, 1, 1, 10**30, None, None]]}, "collectives[0].completed"),
        ({"collectives": [["g", 1.0, 1, 1, 1, "op", 2**64]]}, "collectives[0].size"),
    ],
)
def test_an_integer_its_bigint_column_cannot_hold_is_refused_naming_the_field(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(ReportError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_report(report_body(**fields), "agent", 1.0, owner_uid=0)


def test_the_largest_values_the_columns_hold_are_accepted() -> None:
    body = report_body(
        step=INT64_MAX,
        pid=INT64_MAX,
        checkpoint_step=-(2**63),
        collectives=[["g", 1.0, INT64_MAX, INT64_MAX, INT64_MAX, "op", INT64_MAX]],
    )
    report = parse_report(body, "agent", 1.0, owner_uid=0)
    assert report.heartbeat.step == INT64_MAX and report.collectives[0].size == INT64_MAX


@pytest.mark.parametrize("field", ["section", "job_id"])
@pytest.mark.parametrize("value", ["a\nERROR forged log line", "a\r\x1b[2Jb", "x\x00y", "z\x85w"])
def test_names_with_control_characters_are_refused(field: str, value: str) -> None:
    # names reach log lines, finding summaries and the dashboard: a newline would forge a log line
    with pytest.raises(ReportError, match=field):
        parse_report(report_body(**{field: value}), "node1", 100.0, owner_uid=0)


def test_an_error_message_keeps_its_text_on_one_line() -> None:
    error = {"ts": 1.0, "type": "RuntimeError", "message": "boom\nERROR fleetguard: forged\x1b[31m\ttab"}
    report = parse_report(report_body(error=error), "node1", 100.0, owner_uid=0)
    assert report.error is not None
    assert report.error.message == "boom\\nERROR fleetguard: forged\\x1b[31m\\ttab"
