"""Report parsing: valid reports become records; anything else is a ReportError naming the field."""

from __future__ import annotations

import pytest

from fleetguard.runtime.protocol import MAX_REPORT_BYTES, ReportError, parse_report
from tests.runtime.helpers import report_body


def test_a_valid_report_becomes_heartbeat_timing_and_progress_records() -> None:
    report = parse_report(report_body(), host="agent", received_ts=100.0)
    assert (report.heartbeat.job_id, report.heartbeat.rank, report.heartbeat.pid) == ("job-a", 1, 999)
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
        (report_body(timings=[[1.0, 2, "compute"]]), "timings[0]"),
        (report_body(timings=[[1.0, 2, "compute", float("nan")]]), "timings[0].duration"),
        (report_body(timings=[[1.0, 2, "compute", -1.0]]), "timings[0].duration"),
        (report_body(collectives="world"), "collectives"),
    ],
)
def test_bad_reports_are_rejected_with_the_field_named(body: bytes, field: str) -> None:
    with pytest.raises(ReportError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_report(body, host="agent", received_ts=1.0)


def test_a_report_over_the_size_limit_is_rejected() -> None:
    with pytest.raises(ReportError, match="bytes"):
        parse_report(b" " * (MAX_REPORT_BYTES + 1), host="agent", received_ts=1.0)


def test_a_report_names_the_global_ranks_on_its_host_from_torchruns_local_world_size() -> None:
    body = report_body(rank=13, local_rank=5, world_size=16, local_world_size=8)
    assert parse_report(body, "agent", 0.0).local_ranks() == range(8, 16)
    assert parse_report(report_body(rank=13, local_rank=5), "agent", 0.0).local_ranks() == range(13, 14)
    with pytest.raises(ReportError, match="local_world_size"):
        parse_report(report_body(local_world_size=0), "agent", 0.0)


def test_acknowledged_command_ids_are_parsed_and_checked() -> None:
    assert parse_report(report_body(acked=["job-a:checkpoint:1"]), "agent", 0.0).acked == (
        "job-a:checkpoint:1",
    )
    with pytest.raises(ReportError, match=r"acked\[0\]"):
        parse_report(report_body(acked=[7]), "agent", 0.0)
