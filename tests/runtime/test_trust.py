"""The trust model (docs/runtime.md): a job belongs to the uid that reports it, a pid is signalled only when
it is the sender's own process in the agent's pid namespace, checked again on a pidfd when the signal is sent.
Other users are real processes that drop to uid 65534 (the tests run as root, like CI)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from fleetguard.actions.executor import ActionRequest
from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.peer import Sender
from fleetguard.jobcontrol.trust import (
    SignalResult,
    identify,
    job_key,
    job_owner,
    signal_owned,
    trusted_pid,
)
from fleetguard.records.action_requests import ActionKind
from fleetguard.records.findings import ActionRecord, Finding
from fleetguard.runtime.crashes import CRASH_SETTLE_SECONDS
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig
from tests.runtime.helpers import NOBODY, ReportingRank, report_body, sleeper
from tests.runtime.torchrun_job import wait_until

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root to start")
TORCHRUN_DEFAULT_ID = "torchrun-127.0.0.1-29500"  # what every torchrun job on this host reports by default


class Sink:
    def __init__(self) -> None:
        self.records: list[object] = []

    def __call__(self, batch: Sequence[object]) -> None:
        self.records.extend(batch)

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        return [r for r in self.records if isinstance(r, kind)]


CLOCK = FakeClock()  # analysis time moves only when a test says: real ranks that report once stay unhung


@pytest.fixture
def service() -> Iterator[tuple[RuntimeService, Sink]]:
    sink = Sink()
    config = RuntimeServiceConfig(host="node1", port=0, tick_interval_seconds=0.05, restart_grace_seconds=0.5)
    svc = RuntimeService(config, CLOCK, sink)
    svc.start()
    yield svc, sink
    svc.stop()


def test_a_job_key_carries_the_owner_and_is_read_back_unambiguously() -> None:
    assert job_owner(job_key(1001, "7")) == (1001, "7")
    assert job_key(0, "7") != job_key(1001, "7")  # two users' "job 7" are two jobs
    forged = job_key(NOBODY, job_key(0, "7"))  # a user reporting root's key as its job id
    assert forged != job_key(0, "7") and job_owner(forged) == (NOBODY, job_key(0, "7"))


@needs_root
def test_job_id_squatting_cannot_get_roots_ranks_signalled(service: tuple[RuntimeService, Sink]) -> None:
    svc, sink = service
    squatter = ReportingRank(svc.endpoint, TORCHRUN_DEFAULT_ID, rank=2, world_size=3, uid=NOBODY)
    roots = [ReportingRank(svc.endpoint, TORCHRUN_DEFAULT_ID, rank=r, world_size=3) for r in (0, 1)]
    try:
        squatter.exit(1)  # the squatter's "rank" crashes: a restart of "the job" would kill root's ranks
        squatters_job = job_key(NOBODY, TORCHRUN_DEFAULT_ID)
        wait_until(lambda: not svc.ranks.live_ranks(squatters_job), 30, "the watcher to see the exit")
        CLOCK.advance(CRASH_SETTLE_SECONDS)  # a plain exit code: the verdict waits a moment for more
        wait_until(lambda: sink.of(ActionRecord), 30, "the restart for the squatter's crash")
        [dead] = [f for f in sink.of(Finding) if f.kind == "dead_rank"]
        assert (dead.job_id, dead.rank) == (job_key(NOBODY, TORCHRUN_DEFAULT_ID), 2)
        assert [(a.action, a.outcome) for a in sink.of(ActionRecord)] == [("restart", "skipped")]
        assert all(r.alive() for r in roots)
        assert sorted(svc.ranks.live_pids(job_key(0, TORCHRUN_DEFAULT_ID))) == [0, 1]
    finally:
        for r in (squatter, *roots):
            r.close()


def test_a_root_report_naming_pid_1_is_telemetry_only_and_a_restart_signals_nothing(
    service: tuple[RuntimeService, Sink],
) -> None:
    svc, _ = service
    status, _ = post_as_this_process(svc, report_body(rank=0, local_rank=0, pid=1))
    assert status == 200 and svc.server.stats.untrusted_pids == 1
    assert 1 not in svc.watcher.watched()
    key = job_key(os.getuid(), "job-a")
    assert svc.ranks.live_ranks(key) == {0: None}
    [record] = svc.run_actions([ActionRequest(ActionKind.RESTART, key, "f-1", "silence")])
    assert record.outcome == "skipped" and "may signal" in record.detail


def test_a_report_whose_pid_is_not_the_senders_own_process_is_not_trusted(
    service: tuple[RuntimeService, Sink],
) -> None:
    svc, _ = service
    other = sleeper()  # ours (same uid), alive, but not the process that holds the report's connection
    try:
        assert post_as_this_process(svc, report_body(rank=0, local_rank=0, pid=other.pid))[0] == 200
        assert other.pid not in svc.watcher.watched()
        assert post_as_this_process(svc, report_body(rank=1, local_rank=1, pid=os.getpid()))[0] == 200
        assert os.getpid() in svc.watcher.watched()  # the sender naming itself is trusted
    finally:
        other.kill()
        other.wait()


@needs_root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_rank_in_another_pid_namespace_is_judged_by_heartbeats_alone(
    service: tuple[RuntimeService, Sink],
) -> None:
    svc, _ = service
    code = (
        "import http.client, json, os, sys\n"
        "body = json.dumps({'job_id': 'ns-job', 'rank': 0, 'local_rank': 0, 'world_size': 1,"
        " 'pid': os.getpid()}).encode()\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {svc.port}, timeout=10)\n"
        "c.request('POST', '/v1/report', body=body)\n"
        "print(os.getpid(), c.getresponse().status)\n"
    )
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("pid namespaces are not allowed here")
    inner_pid, status = done.stdout.split()
    assert (inner_pid, status) == ("1", "200")  # its own pid, as its namespace numbers it
    assert svc.server.stats.untrusted_pids == 1
    assert svc.ranks.live_ranks(job_key(0, "ns-job")) == {0: None}
    assert 1 not in svc.watcher.watched()


def post_as_this_process(svc: RuntimeService, body: bytes) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
    try:
        conn.request("POST", "/v1/report", body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# ---- the checks themselves, on fake and real /proc ----


def fake_process(root: Path, pid: int, uid: int, namespace: int, fds: Sequence[str] = ()) -> None:
    d = root / str(pid)
    (d / "ns").mkdir(parents=True)
    (d / "fd").mkdir()
    (d / "stat").write_text(f"{pid} (python) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0\n")
    (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "ns" / "pid").symlink_to(f"pid:[{namespace}]")
    for i, target in enumerate(fds):
        (d / "fd" / str(i)).symlink_to(target)


def test_a_pid_is_trusted_only_when_it_holds_the_senders_socket_as_its_uid_in_our_namespace(
    tmp_path: Path,
) -> None:
    (tmp_path / "self" / "ns").mkdir(parents=True)
    (tmp_path / "self" / "ns" / "pid").symlink_to("pid:[100]")
    fake_process(tmp_path, 10, uid=1001, namespace=100, fds=["socket:[555]"])
    fake_process(tmp_path, 11, uid=1001, namespace=100, fds=["socket:[999]"])  # another connection
    fake_process(tmp_path, 12, uid=1001, namespace=200, fds=["socket:[555]"])  # another pid namespace
    fake_process(tmp_path, 13, uid=1002, namespace=100, fds=["socket:[555]"])  # another user
    sender = Sender(uid=1001, socket_inode=555)
    proc = str(tmp_path)
    found = trusted_pid(sender, 10, proc)
    assert found is not None and (found.pid, found.uid, found.pid_namespace) == (10, 1001, 100)
    assert [trusted_pid(sender, pid, proc) for pid in (11, 12, 13, 14)] == [None] * 4
    assert trusted_pid(Sender(uid=1001), 10, proc) is None  # socket unknown: nothing can be shown


def test_a_signal_reaches_the_owners_own_process_through_its_pidfd() -> None:
    proc = sleeper()
    target = identify(proc.pid)
    assert target is not None
    assert signal_owned(target, os.getuid(), signal.SIGTERM) is SignalResult.SENT
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert signal_owned(target, os.getuid(), signal.SIGTERM) is SignalResult.GONE


def test_a_process_that_is_no_longer_the_one_reported_is_refused_at_signal_time() -> None:
    proc = sleeper()
    try:
        target = identify(proc.pid)
        assert target is not None
        reused = replace(target, start_ticks=target.start_ticks + 1)  # the pid now names another process
        assert signal_owned(reused, os.getuid(), signal.SIGTERM) is SignalResult.REFUSED
        assert (
            signal_owned(target, os.getuid() + 1, signal.SIGTERM) is SignalResult.REFUSED
        )  # not the owner's
        other_ns = replace(target, pid_namespace=target.pid_namespace + 1)
        assert signal_owned(other_ns, os.getuid(), signal.SIGTERM) is SignalResult.REFUSED
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@needs_root
def test_another_users_process_is_never_signalled_for_a_roots_job() -> None:
    code = (
        "import os, sys, time\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        target = identify(proc.pid)
        assert target is not None and target.uid == NOBODY
        assert signal_owned(target, 0, signal.SIGKILL) is SignalResult.REFUSED
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
