"""The loopback endpoint: binds loopback only, answers bad input with 4xx (counted) and keeps serving."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.commands import Command, CommandQueue
from fleetguard.jobcontrol.peer import Sender
from fleetguard.jobcontrol.trust import job_key
from fleetguard.runtime.protocol import RankReport
from fleetguard.runtime.server import NonLoopbackBindError, RuntimeServer, require_loopback
from tests.runtime.helpers import report_body


@pytest.fixture
def served():
    reports: list[RankReport] = []
    commands = CommandQueue()

    def on_report(report: RankReport) -> list[Command]:
        reports.append(report)
        return commands.take(*report.key, report.acked)

    server = RuntimeServer(on_report, host="agent", clock=FakeClock(), port=0)
    server.start()
    yield server, reports, commands
    server.stop()


def post(port: int, body: bytes, path: str = "/v1/report") -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


@pytest.mark.parametrize("address", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_binding_beyond_loopback_is_refused(address: str) -> None:
    with pytest.raises(NonLoopbackBindError, match="loopback"):
        RuntimeServer(lambda r: [], host="agent", clock=FakeClock(), bind_address=address, port=0)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "localhost"])
def test_loopback_addresses_are_accepted(address: str) -> None:
    assert require_loopback(address) in ("127.0.0.1", "::1")


def test_the_server_listens_on_loopback(served) -> None:
    server, _, _ = served
    assert server.address == "127.0.0.1"


def test_a_valid_report_is_stored_and_answered_with_the_ranks_commands(served) -> None:
    server, reports, commands = served
    commands.push(job_key(os.getuid(), "job-a"), [1], "checkpoint", "test")
    status, answer = post(server.port, report_body())
    assert status == 200
    assert [c["kind"] for c in answer["commands"]] == ["checkpoint"]
    assert reports[0].heartbeat.rank == 1
    again = post(server.port, report_body())[1]["commands"]  # not acknowledged yet: sent again
    assert [c["id"] for c in again] == [c["id"] for c in answer["commands"]]
    acked = [c["id"] for c in again]
    assert post(server.port, report_body(acked=acked))[1]["commands"] == []  # acknowledged: done


def test_bad_json_is_a_400_counted_and_the_server_keeps_serving(served) -> None:
    server, reports, _ = served
    assert post(server.port, b"{garbage")[0] == 400
    assert post(server.port, report_body(rank="x"))[0] == 400
    assert server.stats.reports_rejected == 2
    assert post(server.port, report_body())[0] == 200
    assert len(reports) == 1


def test_an_unknown_path_is_a_404(served) -> None:
    server, _, _ = served
    assert post(server.port, report_body(), path="/admin")[0] == 404


def test_an_oversized_body_is_refused_without_reading_it(served) -> None:
    server, _, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.putrequest("POST", "/v1/report")
    conn.putheader("Content-Length", str(10**9))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    assert server.http_stats.bad_requests == 1


def test_a_failing_report_handler_is_a_500_not_a_dead_server() -> None:
    def broken(report: RankReport) -> list[Command]:
        raise RuntimeError("store is down")

    server = RuntimeServer(broken, host="agent", clock=FakeClock(), port=0)
    server.start()
    try:
        assert post(server.port, report_body())[0] == 500
        assert post(server.port, report_body())[0] == 500
        assert server.stats.handler_errors == 2
    finally:
        server.stop()


def test_a_kept_alive_connection_is_refused_once_the_server_stops() -> None:
    server = RuntimeServer(lambda r: [], host="agent", clock=FakeClock(), port=0)
    server.start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/v1/report", body=report_body())
    first = conn.getresponse()
    first.read()
    assert first.status == 200
    server.stop()
    try:  # closed by the server, or answered 503: either way nothing is acknowledged after stop()
        conn.request("POST", "/v1/report", body=report_body())
        status = conn.getresponse().status
    except (ConnectionError, http.client.HTTPException, OSError):
        status = None
    assert status in (None, 503)
    conn.close()


def test_a_report_naming_a_pid_the_sender_does_not_own_is_kept_but_marked_untrusted() -> None:
    seen: list[RankReport] = []
    srv = RuntimeServer(keep_in(seen), host="agent", clock=FakeClock(), port=0)
    sender = Sender(uid=os.getuid() + 4242, socket_inode=1)  # not the owner of the pid it names
    status, _ = srv.handle_body(report_body(pid=os.getpid()), sender)
    assert status == 200 and seen[0].pid_trusted is False and srv.stats.untrusted_pids == 1
    srv.stop()


def test_two_users_reporting_the_same_job_id_are_two_jobs() -> None:
    seen: list[RankReport] = []
    srv = RuntimeServer(keep_in(seen), host="agent", clock=FakeClock(), port=0)
    assert srv.handle_body(report_body(job_id="job-a"), Sender(uid=1001))[0] == 200
    assert srv.handle_body(report_body(job_id="job-a"), Sender(uid=0))[0] == 200
    assert [r.heartbeat.job_id for r in seen] == [job_key(1001, "job-a"), job_key(0, "job-a")]
    srv.stop()


def test_a_report_whose_sender_cannot_be_identified_is_refused() -> None:
    srv = RuntimeServer(lambda r: [], host="agent", clock=FakeClock(), port=0)
    assert srv.handle_body(report_body(), None)[0] == 403 and srv.stats.reports_refused == 1
    srv.stop()


def test_over_http_the_sender_is_found_and_its_own_pid_trusted(served) -> None:
    server, reports, _ = served
    assert post(server.port, report_body(pid=os.getpid()))[0] == 200
    assert reports[-1].pid_trusted  # this test process sent it, naming itself
    assert reports[-1].heartbeat.job_id == job_key(os.getuid(), "job-a")


def test_json_nested_100000_deep_is_a_400_not_a_traceback(served) -> None:
    server, _, _ = served
    deep = b'{"job_id": "job-a", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, answer = post(server.port, deep)
    assert status == 400 and "nested" in answer["error"]
    assert server.stats.reports_rejected == 1 and server.http_stats.handler_errors == 0
    assert post(server.port, report_body())[0] == 200


def test_an_out_of_range_integer_is_a_400_naming_the_field_and_counted(served) -> None:
    server, reports, _ = served
    status, answer = post(server.port, report_body(step=10**20))
    assert status == 400 and answer["error"].startswith("step:")
    status, answer = post(server.port, report_body(collectives=[["g", 1.0, 10**30, 1, 1, None, None]]))
    assert status == 400 and "collectives[0].enqueued" in answer["error"]
    assert server.stats.reports_rejected == 2 and reports == []


def test_hundreds_of_half_open_connections_do_not_block_a_real_report(served) -> None:
    server, reports, _ = served
    idle = []
    try:
        for i in range(400):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            # half a request head, then silence (slowloris); every other one sends nothing at all
            if i % 2:
                s.sendall(b"POST /v1/report HTTP/1.1\r\nHost: x\r\nContent-Le")
            idle.append(s)
        assert post(server.port, report_body())[0] == 200
        assert len(reports) == 1
        assert threading.active_count() < 100  # no thread per connection
    finally:
        for s in idle:
            s.close()


def test_a_report_round_trip_on_a_kept_alive_connection_is_one_answer_per_request(served) -> None:
    server, reports, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for _ in range(20):
            conn.request("POST", "/v1/report", body=report_body())
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["commands"] == []
        assert len(reports) == 20
        assert server.http_stats.connections_accepted == 1
    finally:
        conn.close()


@pytest.mark.parametrize("field", ["section", "error"])
def test_a_report_with_a_lone_surrogate_is_a_400_and_nothing_is_kept(served, field: str) -> None:
    server, reports, _ = served
    value: object = "\ud800"
    if field == "error":
        value = {"ts": 1.0, "type": "ValueError", "message": "bad \udfff"}
    body = json.dumps(json.loads(report_body(pid=os.getpid())) | {field: value}).encode()
    assert b"\\ud" in body  # json.dumps escapes it, as a client would send it
    status, answer = post(server.port, body)
    assert status == 400 and "surrogate" in answer["error"]
    assert reports == []


def test_what_one_connection_remembers_about_pids_is_bounded(served) -> None:
    # a client naming a new pid in every report (on one kept-alive connection) must not grow the agent
    server, reports, _ = served
    memo: dict[str, object] = {}
    sender = Sender(uid=os.getuid(), socket_inode=1)
    for pid in range(1, 5001):
        status, _ = server.handle_body(report_body(pid=pid), sender, memo)
        assert status == 200
    assert len(memo) <= 16
    assert len(reports) == 5000


def keep_in(seen: list[RankReport]) -> Callable[[RankReport], list[Command]]:
    """A report handler that keeps each report and sends no command back."""

    def handle(report: RankReport) -> list[Command]:
        seen.append(report)
        return []

    return handle
