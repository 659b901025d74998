"""The training client: harmless without an agent, delivers records to a real loopback server, obeys."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from fleetguard import client as fg
from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.commands import Command, CommandQueue
from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from fleetguard.runtime.protocol import RankReport
from fleetguard.runtime.server import RuntimeServer

JOB = job_key(os.getuid(), "job-a")  # how the agent keys job-a reported by this user


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def identity(rank: int = 3) -> fg.Identity:
    return fg.Identity(job_id="job-a", rank=rank, local_rank=rank, world_size=4, host="h", pid=4242)


class Collecting:
    def __init__(self) -> None:
        self.reports: list[RankReport] = []
        self.commands = CommandQueue()

    def __call__(self, report: RankReport) -> list[Command]:
        self.reports.append(report)
        return self.commands.take(*report.key, report.acked)


@pytest.fixture
def server():
    collected = Collecting()
    srv = RuntimeServer(collected, host="agent-host", clock=FakeClock(), port=0)
    srv.start()
    yield srv, collected
    srv.stop()


def test_identity_comes_from_the_torchrun_environment() -> None:
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "run-7"}
    ident = fg.Identity.from_env(env=env)
    assert (ident.rank, ident.local_rank, ident.world_size, ident.job_id) == (5, 1, 8, "run-7")


def test_fleetguard_job_id_wins_over_the_torchelastic_run_id() -> None:
    ident = fg.Identity.from_env(env={"FLEETGUARD_JOB_ID": "mine", "TORCHELASTIC_RUN_ID": "run-7"})
    assert ident.job_id == "mine"


def test_without_an_agent_reports_fail_quietly_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{unused_port()}", start=False)
    with caplog.at_level(logging.WARNING, logger=fg.LOGGER_NAME):
        client.step(1)
        with client.section("compute"):
            pass
        results = [client.report_once() for _ in range(3)]
    assert results == [False, False, False]
    assert client.stats.reports_failed == 3
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_an_exception_inside_a_section_propagates_unchanged_and_is_not_timed() -> None:
    client = fg.Client(identity(), start=False)
    client.step(0)
    with pytest.raises(KeyError), client.section("compute"):
        raise KeyError("user error")
    assert client.queued_timings == 0


def test_module_functions_do_nothing_before_attach() -> None:
    assert fg.current() is None
    fg.step(1)
    with fg.section("compute"):
        pass
    fg.collective("world", enqueued=1)
    fg.checkpoint_done(1)
    assert fg.checkpoint_requested() is False


def test_heartbeat_timings_and_collectives_reach_the_server(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", start=False)
    client.step(7)
    with client.section("compute"):
        pass
    client.collective("world", enqueued=7, started=7, completed=6, op="gloo:all_reduce", size=10)
    client.step(8)
    assert client.report_once() is True
    report = collected.reports[-1]
    assert isinstance(report.heartbeat, Heartbeat)
    assert (report.heartbeat.host, report.heartbeat.rank, report.heartbeat.pid) == ("agent-host", 3, 4242)
    assert report.heartbeat.step == 8
    assert [(t.step, t.section) for t in report.timings] == [(7, "compute"), (7, "step")]
    assert all(isinstance(t, StepTiming) for t in report.timings)
    [progress] = report.collectives
    assert isinstance(progress, CollectiveProgress)
    assert (progress.last_enqueued, progress.last_completed, progress.op, progress.size) == (
        7,
        6,
        "gloo:all_reduce",
        10,
    )


def test_timings_are_sent_once(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", start=False)
    client.step(1)
    client.step(2)
    client.report_once()
    client.report_once()
    assert [len(r.timings) for r in collected.reports] == [1, 0]


def test_a_checkpoint_command_comes_back_and_runs_the_callback_at_the_next_step(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", start=False)
    calls: list[int] = []
    client.on_checkpoint(lambda: calls.append(client.current_step or 0))
    client.step(1)
    collected.commands.push(JOB, [3], "checkpoint", "straggler")
    client.report_once()
    assert client.checkpoint_requested() is True
    assert calls == []  # never on the background thread: only at a step boundary
    client.step(2)
    assert calls == [2]
    client.checkpoint_done(2)
    assert client.checkpoint_requested() is False


def test_a_stop_command_sets_stop_requested_and_runs_the_stop_callback(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", start=False)
    stopped: list[bool] = []
    client.on_stop(lambda: stopped.append(True))
    collected.commands.push(JOB, [3], "stop", "crash loop")
    client.report_once()
    client.step(1)
    assert client.stop_requested() is True
    assert stopped == [True]


def test_a_failing_callback_does_not_reach_the_training_loop(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", start=False)

    def broken() -> None:
        raise RuntimeError("user bug")

    client.on_checkpoint(broken)
    collected.commands.push(JOB, [3], "checkpoint")
    client.report_once()
    client.step(1)  # must not raise
    assert client.checkpoint_requested() is True


def test_the_latest_complete_checkpoint_is_reported(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", start=False)
    client.checkpoint_done(40)
    client.report_once()
    assert collected.reports[-1].checkpoint_step == 40


def test_close_sends_a_finished_status_from_the_background_thread(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", heartbeat_interval_seconds=60.0)
    client.close()
    assert collected.reports[-1].heartbeat.status == "finished"


def test_the_timing_queue_is_bounded_and_counts_what_it_drops() -> None:
    client = fg.Client(identity(), start=False)
    client.step(0)
    for _ in range(fg.MAX_QUEUED_TIMINGS + 10):
        with client.section("compute"):
            pass
    assert client.queued_timings == fg.MAX_QUEUED_TIMINGS
    assert client.stats.dropped_timings == 10


def test_importing_the_client_pulls_in_only_the_standard_library() -> None:
    # Import time itself is a benchmark figure (bench/client_overhead.py), not a timed test: what keeps it
    # small is that nothing outside the standard library (and the client module itself) is loaded.
    code = (
        "import sys; before = set(sys.modules); import fleetguard.client; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in sys.stdlib_module_names and m not in ('fleetguard', 'fleetguard.client')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("ending", "status"),
    [("pass", "finished"), ("raise SystemExit(0)", "finished"), ("raise KeyboardInterrupt", "exiting")],
)
def test_a_process_says_finished_at_exit_only_when_it_did_not_die_of_an_exception(
    server, ending: str, status: str
) -> None:
    srv, collected = server
    code = (
        "from fleetguard import client as fg\n"
        f"fg.attach(job_id='job-a', endpoint='127.0.0.1:{srv.port}', heartbeat_interval_seconds=60)\n"
        "fg.step(1)\n"
        f"{ending}\n"
    )
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=30)
    assert collected.reports[-1].heartbeat.status == status


def test_an_uncaught_exception_is_reported_with_its_time_before_the_process_exits(server) -> None:
    srv, collected = server
    code = (
        "import time\nfrom fleetguard import client as fg\n"
        f"fg.attach(job_id='job-a', endpoint='127.0.0.1:{srv.port}', heartbeat_interval_seconds=60)\n"
        "fg.step(1)\nraise ValueError('boom at step 1')\n"
    )
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "PATH": "/usr/bin:/bin"}
    before = time.time()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 1 and "ValueError: boom at step 1" in done.stderr  # its traceback as ever
    failing = [r for r in collected.reports if r.error is not None]
    assert failing and failing[0].heartbeat.status == "exiting"
    error = failing[0].error
    assert error is not None and (error.error_type, error.message) == ("ValueError", "boom at step 1")
    assert before <= error.ts <= time.time()


def test_an_exception_only_torchelastics_error_file_saw_is_reported_at_exit(server, tmp_path) -> None:
    srv, collected = server
    error_file = tmp_path / "error.json"
    code = (
        "import json, os, time\nfrom fleetguard import client as fg\n"
        f"fg.attach(job_id='job-a', endpoint='127.0.0.1:{srv.port}', heartbeat_interval_seconds=60)\n"
        "doc = {'message': {'message': 'RuntimeError: CUDA error: an illegal memory access',"
        " 'extraInfo': {'py_callstack': '...', 'timestamp': str(int(time.time()))}}}\n"
        "open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w').write(json.dumps(doc))\n"
    )  # the process then ends normally: only the error file knows it failed
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "PATH": "/usr/bin:/bin"}
    env["TORCHELASTIC_ERROR_FILE"] = str(error_file)
    subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=30, check=True)
    last = collected.reports[-1]
    assert last.heartbeat.status == "exiting" and last.error is not None
    assert (last.error.error_type, last.error.message) == (
        "RuntimeError",
        "CUDA error: an illegal memory access",
    )


def test_reports_from_several_threads_share_the_connection_one_at_a_time(server) -> None:
    import threading

    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", heartbeat_interval_seconds=60.0)
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.extend(client.report_once() for _ in range(20)))
        for _ in range(2)
    ]  # beside the client's own background thread
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    assert results == [True] * 40 and client.stats.reports_failed == 0
    assert len(collected.reports) >= 40


def test_torchruns_default_run_id_none_is_made_unique_by_the_rendezvous_address() -> None:
    env = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29511"}
    assert fg.Identity.from_env(env=env).job_id == "torchrun-10.0.0.7-29511"
    assert fg.Identity.from_env(env={**env, "TORCHELASTIC_RUN_ID": "run-7"}).job_id == "run-7"


def test_numpy_steps_and_sequence_numbers_are_reported_as_plain_integers(server) -> None:
    import numpy as np

    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", heartbeat_interval_seconds=60.0)
    client.step(np.int64(3))  # type: ignore[arg-type]  # numpy integers, as training code passes them
    client.collective(
        "world",
        enqueued=np.int64(9),  # type: ignore[arg-type]
        started=np.int32(9),  # type: ignore[arg-type]
        completed=np.int64(8),  # type: ignore[arg-type]
        size=np.int64(4),  # type: ignore[arg-type]
    )
    client.checkpoint_done(np.int64(2))  # type: ignore[arg-type]
    assert client.report_once()
    client.close()
    report = collected.reports[-1]
    assert (report.heartbeat.step, report.checkpoint_step) == (3, 2)
    assert [(c.last_enqueued, c.last_started, c.last_completed) for c in report.collectives] == [(9, 9, 8)]


def test_a_report_that_cannot_be_built_does_not_end_the_heartbeat(server, monkeypatch) -> None:
    import time

    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", heartbeat_interval_seconds=0.05)
    real_build = client._build_report
    calls = {"n": 0}

    def flaky_build() -> bytes:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("not serialisable")
        return real_build()

    monkeypatch.setattr(client, "_build_report", flaky_build)
    deadline = time.monotonic() + 10
    while len(collected.reports) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a real thread, bounded by the deadline
    client.close()
    assert calls["n"] >= 3 and len(collected.reports) >= 3
    assert client.stats.reports_failed >= 1


def test_a_job_id_the_agent_would_refuse_is_made_safe_rather_than_silencing_the_rank() -> None:
    from fleetguard.runtime.protocol import parse_report
    from tests.runtime.helpers import report_body

    job_id = fg.Identity.from_env(env={"FLEETGUARD_JOB_ID": "--my job; v2"}).job_id
    assert job_id == "my_job__v2"
    report = parse_report(report_body(job_id=job_id), "h", 0.0, owner_uid=0)
    assert report.heartbeat.job_id == job_key(0, job_id)


def test_the_number_of_ranks_on_this_host_comes_from_torchrun() -> None:
    assert fg.Identity.from_env(env={"LOCAL_WORLD_SIZE": "8"}).local_world_size == 8
    assert fg.Identity.from_env(env={"LOCAL_WORLD_SIZE": "-3"}).local_world_size is None
    assert fg.Identity.from_env(env={}).local_world_size is None


def test_a_command_whose_reply_was_lost_comes_again_and_is_applied_once(server) -> None:
    srv, collected = server
    client = fg.Client(identity(), endpoint=f"127.0.0.1:{srv.port}", heartbeat_interval_seconds=60.0)
    ran: list[str] = []
    client.on_checkpoint(lambda: ran.append("checkpoint"))
    collected.commands.push(JOB, [3], "checkpoint")
    collected.commands.take(JOB, 3)  # a reply that never reached the rank (client timeout)
    assert client.report_once()  # the command is sent again ...
    assert client.report_once()  # ... and again until acknowledged, but applied once
    client.step(1)
    assert ran == ["checkpoint"] and client.stats.commands_received == 1
    assert collected.commands.pending(JOB, 3) == []  # the acknowledgement emptied the queue
    client.close()
