"""Rank reports never make root act on the host (issue 16, attack #2), through a real `fleetguard agent`
process run as root with `cordon_gpu_hang = true` and a cordon command that writes a marker file.

An unprivileged user (uid 65534) runs two ranks that report through the training client, one of them
"enqueued, not started" (a blocked GPU stream, the hang kind that evicts hardware), then stop stepping. The
agent restarts that job, as its owner, and never runs the cordon command. The same hang with an XID 48 for
that rank's process in the agent's kernel log (the agent's own evidence, which no rank can write) cordons.
The tests run as root, like CI."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from collectors.simulated_kernel_log import xid_line

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="needs root: the agent runs as root, the ranks as uid 65534"
    ),
]

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]

# A rank of the user's job: reports through the real client (its own connection, so its pid is trusted),
# steps for a few seconds with its collective counters, then stops stepping (heartbeats go on: stalled).
_RANK = """
import encodings.idna, http.client, json, logging, os, socket, sys, time
from fleetguard import client as fg
endpoint, rank = sys.argv[1], int(sys.argv[2])
os.setgroups([]); os.setgid(65534); os.setuid(65534)  # all imported above: root's files stay unread
c = fg.Client(fg.Identity("user-job", rank, rank, 2, "node1", os.getpid(), 2), endpoint=endpoint,
              heartbeat_interval_seconds=0.2)
for step in range(1, 25):
    c.step(step)
    # rank 1 enqueued the step's all-reduce but its GPU never started it
    c.collective("world", step, step - 1 if rank == 1 else step, step - 1, "nccl:all_reduce", 1024)
    time.sleep(0.2)
print("stalled", flush=True)
time.sleep(120)
"""


@dataclass
class Dirs:
    root: Path  # private to root: the agent's config, store and kernel log
    shared: Path  # where the job owner's restart command may write


@pytest.fixture
def dirs() -> Iterator[Dirs]:
    root = Path(tempfile.mkdtemp(prefix="fleetguard-host-actions-"))
    shared = Path(tempfile.mkdtemp(prefix="fleetguard-host-actions-shared-", dir="/tmp"))
    shared.chmod(0o777)
    yield Dirs(root, shared)
    shutil.rmtree(root)
    shutil.rmtree(shared)


def _writer(marker: Path, *words: str) -> list[str]:
    code = "import os, sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')"
    return [sys.executable, "-c", code, str(marker), *words]


def _config(dirs: Dirs) -> Path:
    cordon = _writer(dirs.root / "cordoned", "{host}")
    # a shell the job owner may run ("$0" the file, "$1" the job id: argv words, no data in the script)
    restart = ["/bin/sh", "-c", 'echo "$1" >> "$0"', str(dirs.shared / "restarted"), "{job}"]
    path = dirs.root / "agent.toml"
    path.write_text(
        '[agent]\nhost = "node1"\nmetrics_port = 0\nsample_interval_seconds = 0.5\n'
        "flush_interval_seconds = 1.0\n"
        f'[collectors]\nnvml = false\nrdma = false\nkmsg_path = "{dirs.root / "kmsg.log"}"\n'
        'kmsg_state_path = ""\n'
        f"[runtime]\nport = 0\ncordon_gpu_hang = true\ncordon_command = {json.dumps(cordon)}\n"
        f"restart_command = {json.dumps(restart)}\n"
        f'[store]\npath = "{dirs.root / "agent.duckdb"}"\n'
    )
    return path


@dataclass
class Running:
    agent: subprocess.Popen[bytes]
    ranks: list[subprocess.Popen[str]]

    def stop(self) -> None:
        procs: list[subprocess.Popen[Any]] = [*self.ranks, self.agent]
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for rank in self.ranks:
            if rank.stdout is not None:
                rank.stdout.close()


def _endpoint(log: Path, agent: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"training ranks report to (\S+?)(?:;|$)", log.read_text(), re.M)
        if found:
            return found.group(1)
        assert agent.poll() is None, log.read_text()
        time.sleep(0.1)  # polling a real agent process's log: it offers no event to wait on
    raise TimeoutError(log.read_text())


@pytest.fixture
def running(dirs: Dirs) -> Iterator[Running]:
    log = dirs.root / "agent.log"
    (dirs.root / "kmsg.log").write_text("")
    with log.open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "fleetguard", "agent", "--config", str(_config(dirs)), "--duration", "60"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    state = Running(agent, [])
    try:
        endpoint = _endpoint(log, agent)
        state.ranks = [
            subprocess.Popen(
                [sys.executable, "-c", _RANK, endpoint, str(rank)],
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            for rank in (0, 1)
        ]
        yield state
    finally:
        state.stop()


def _wait_for(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.2)  # polling a real file another process writes: it offers no event to wait on
    return ""


def _stalled(running: Running) -> None:
    for rank in running.ranks:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "stalled"


def test_a_hang_only_an_unprivileged_users_ranks_report_restarts_their_job_and_never_cordons(
    dirs: Dirs, running: Running
) -> None:
    _stalled(running)
    restarted = _wait_for(dirs.shared / "restarted", 45)
    assert restarted.strip() == "user-job"  # the user's own job, by its own id
    assert os.stat(dirs.shared / "restarted").st_uid == NOBODY  # run as the job's owner, not root
    time.sleep(3)  # the cordon would follow the restart at once
    assert not (dirs.root / "cordoned").exists()
    running.agent.send_signal(signal.SIGTERM)
    assert running.agent.wait(timeout=60) == 0
    con = duckdb.connect(str(dirs.root / "agent.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT action, target, outcome, detail FROM actions ORDER BY ts").fetchall()
    finally:
        con.close()
    assert "cordon" not in {r[0] for r in rows}
    refused = [r for r in rows if "not cordoning node1" in r[3]]
    assert refused and all(r[:3] == ("none", "host/node1", "skipped") for r in refused)
    assert "only the job's ranks report this hang" in refused[0][3]
    assert ("restart", "succeeded") in {(r[0], r[2]) for r in rows}


def test_the_same_hang_with_an_xid_the_kernel_logged_for_that_ranks_process_cordons(
    dirs: Dirs, running: Running
) -> None:
    line = xid_line("0000:3b:00.0", 48, running.ranks[1].pid, "python3", "An uncorrectable double bit error")
    with (dirs.root / "kmsg.log").open("a") as log:
        log.write(f"3,1,{int(time.monotonic() * 1e6)},-;{line}\n")
    _stalled(running)
    assert _wait_for(dirs.root / "cordoned", 45).strip() == "node1"
    assert _wait_for(dirs.shared / "restarted", 5).strip() == "user-job"
