"""Shared bits for runtime tests: a JSON report body builder and real child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from fleetguard.jobcontrol.trust import identify, job_key
from fleetguard.runtime.protocol import RankReport, parse_report


def report_body(**overrides: Any) -> bytes:
    doc: dict[str, Any] = {
        "v": 1,
        "job_id": "job-a",
        "rank": 1,
        "local_rank": 1,
        "world_size": 4,
        "pid": 999,
        "host": "client-host",
        "step": 10,
        "section": "compute",
        "status": "running",
        "checkpoint_step": None,
        "timings": [[1.0, 9, "compute", 0.25]],
        "collectives": [["world", 1.0, 9, 9, 8, "gloo:all_reduce", 128]],
    }
    doc.update(overrides)
    return json.dumps(doc).encode()


def sleeper(
    seconds: float = 30.0, ignore_sigterm: bool = False, new_session: bool = True
) -> subprocess.Popen[bytes]:
    """A real child that sleeps (optionally ignoring SIGTERM), in its own session like a torchrun worker."""
    code = "import signal,sys,time\n"
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    code += f"time.sleep({seconds})\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=new_session
    )
    _sleepers.append(proc)
    assert proc.stdout is not None
    proc.stdout.readline()  # the signal disposition is in place
    return proc


_sleepers: list[subprocess.Popen[bytes]] = []


def reaped_sleepers() -> Iterator[None]:
    """Fixture body: after the test, every sleeper it started is continued, killed and waited for, so
    one the test SIGSTOPped (or failed before cleaning up) is not left stopped for hours."""
    yield
    while _sleepers:
        proc = _sleepers.pop()
        if proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:
                    break
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


JOB = job_key(0, "job-a")  # report_body's job as the agent keys it when root reports it


def root_report(body: bytes, received_ts: float, host: str = "node1") -> RankReport:
    """A report root sent from the very process it names, as the server would pass it on: the pid is
    trusted when it is a live process here (the tests' real child processes)."""
    report = parse_report(body, host, received_ts, owner_uid=0)
    return replace(report, process=identify(report.heartbeat.pid))


NOBODY = 65534

_RANK_SCRIPT = """
import encodings.idna, http.client, json, logging, os, socket, sys, time
from fleetguard import client as fg
endpoint, job = sys.argv[1], sys.argv[2]
rank, world, uid = (int(a) for a in sys.argv[3:6])
if uid != os.getuid():
    # everything is imported above: the interpreter's own files may not be readable by this user
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
c = fg.Client(fg.Identity(job, rank, rank, world, "h", os.getpid()), endpoint=endpoint, start=False)
print("reported" if c.report_once() else "failed", flush=True)
line = sys.stdin.readline().strip()
while line == "report":
    print("reported" if c.report_once() else "failed", flush=True)
    line = sys.stdin.readline().strip()
sys.exit(int(line or 0))
"""


class ReportingRank:
    """A real rank process that sends its own reports (through fleetguard.client) as `uid`, then waits:
    `report()` sends another, `exit(code)` ends it with that exit code."""

    def __init__(self, endpoint: str, job: str, rank: int, world_size: int, uid: int = 0) -> None:
        args = [endpoint, job, str(rank), str(world_size), str(uid)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RANK_SCRIPT, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self._expect_report()

    def _expect_report(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "reported", f"rank {self.pid} could not report: {line!r}"

    def report(self) -> None:
        self._send("report")
        self._expect_report()

    def exit(self, code: int) -> None:
        self._send(str(code))
        self.proc.wait(timeout=30)

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
