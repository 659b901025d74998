"""The agent under the shipped unit's capability set (parsed from data/fleetguard-agent.service), applied with
setpriv since systemd is not PID 1 here: root with only those capabilities, no new privileges, umask 0077.
The agent samples and keys another user's rank by its owner; the runtime's own trust functions (identify a
process, find who holds a socket, signal through a pidfd, run a command as the owner, read a 0600 dump) work
on a process of uid 65534 with that set, and each fails without the one capability it needs. (The unit's
system-call filter and Protect* settings need systemd to apply; they are checked by tests/test_systemd_units.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from tests.runtime.helpers import NOBODY, ReportingRank

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="limiting root's capabilities needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)"),
]

UNIT = Path(__file__).resolve().parents[2] / "data" / "fleetguard-agent.service"
FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))


def unit_capabilities() -> list[str]:
    for line in UNIT.read_text().splitlines():
        if line.startswith("CapabilityBoundingSet="):
            return line.partition("=")[2].split()
    raise AssertionError("the unit sets no CapabilityBoundingSet")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def setpriv(capabilities: list[str]) -> list[str]:
    """The argv prefix that runs a command as root with only `capabilities`, like the unit's bounding set."""
    bounding = ",".join(["-all", *(f"+{c.removeprefix('CAP_').lower()}" for c in capabilities)])
    return ["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all", "--no-new-privs", "--"]


@contextmanager
def confined_agent(
    tmp_path: Path, capabilities: list[str], runtime_port: int
) -> Iterator[subprocess.Popen[str]]:
    argv = [
        *setpriv(capabilities),
        "sh",
        "-c",
        'umask 077 && exec "$@"',
        "sh",
        FLEETGUARD,
        "agent",
        "--simulate",
        "1x2",
        "--no-faults",
        "--metrics-port",
        "0",
        "--store",
        str(tmp_path / "fleet.duckdb"),
    ]
    env = {
        **os.environ,
        "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(tmp_path / "kmsg.seq"),
        "FLEETGUARD_RUNTIME_ENABLED": "true",
        "FLEETGUARD_RUNTIME_PORT": str(runtime_port),
    }
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "/metrics at http" in line:
                break
        else:
            raise AssertionError("the confined agent did not start")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def capabilities_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    raise AssertionError("no CapEff")


def test_the_agent_samples_and_knows_another_users_rank_with_only_the_units_capabilities(
    tmp_path: Path,
) -> None:
    port = free_port()
    caps = unit_capabilities()
    with confined_agent(tmp_path, caps, port) as agent:
        effective = capabilities_of(agent.pid)
        assert bin(effective).count("1") == len(caps)  # exactly the unit's set, not root's full one
        rank = ReportingRank(f"127.0.0.1:{port}", "confined", 0, 1, uid=NOBODY)  # asserts it was accepted
        try:
            rank.report()
        finally:
            rank.close()
        agent.send_signal(signal.SIGTERM)
        out, _err = agent.communicate(timeout=60)
        assert agent.returncode == 0
    assert json.loads(out.strip().splitlines()[-1])["rounds"] >= 1
    con = duckdb.connect(str(tmp_path / "fleet.duckdb"), read_only=True)
    try:
        jobs = {r[0] for r in con.execute("SELECT job_id FROM heartbeats").fetchall()}
    finally:
        con.close()
    assert jobs == {f"confined@uid{NOBODY}"}  # keyed by the owner the agent found through /proc
    assert oct((tmp_path / "fleet.duckdb").stat().st_mode & 0o777) == "0o600"  # UMask=0077


PROBE = """
import json, os, signal, subprocess, sys
from fleetguard.jobcontrol.trust import holds_socket, identify, signal_owned
pid, inode, uid = (int(a) for a in sys.argv[1:4])
try:
    with open(sys.argv[4], "rb") as dump:  # a flight-recorder dump the rank's user wrote 0600
        reads_private_file = dump.read() == b"dump"
except PermissionError:
    reads_private_file = False
who = identify(pid)
try:
    sent = signal_owned(who, uid, signal.SIGWINCH).value if who else "unidentified"
except PermissionError:
    sent = "denied"
try:
    ran = subprocess.run(["id", "-u"], user=uid, group=uid, extra_groups=[], capture_output=True, text=True)
    run_as = ran.stdout.strip() == str(uid)
except PermissionError:
    run_as = False
print(json.dumps({"identify": who is not None, "holds_socket": holds_socket(pid, inode), "signal": sent,
                  "run_as": run_as, "reads_private_file": reads_private_file}))
"""

TARGET = """
import os, signal, socket, sys
s = socket.socket()
os.setgroups([]); os.setgid(int(sys.argv[1])); os.setuid(int(sys.argv[1]))
print(os.fstat(s.fileno()).st_ino, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def nobodys_process() -> Iterator[tuple[int, int]]:
    """A process of uid 65534 in its own session holding a socket: (pid, socket inode)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TARGET, str(NOBODY)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.pid, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def probe(capabilities: list[str], pid: int, inode: int, dump: Path) -> dict[str, object]:
    done = subprocess.run(
        [*setpriv(capabilities), sys.executable, "-c", PROBE, str(pid), str(inode), str(NOBODY), str(dump)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


ALL_WORK = {
    "identify": True,
    "holds_socket": True,
    "signal": "sent",
    "run_as": True,
    "reads_private_file": True,
}


@pytest.mark.parametrize(
    ("dropped", "broken"),
    [
        (None, {}),
        ("CAP_KILL", {"signal": "denied"}),
        ("CAP_SYS_PTRACE", {"identify": False, "holds_socket": False, "signal": "unidentified"}),
        ("CAP_DAC_READ_SEARCH", {"reads_private_file": False}),
        ("CAP_SETUID", {"run_as": False}),
        ("CAP_SETGID", {"run_as": False}),
    ],
)
def test_each_capability_the_unit_keeps_is_one_the_runtime_needs(
    nobodys_process: tuple[int, int], dropped: str | None, broken: dict[str, object], tmp_path: Path
) -> None:
    """With the unit's set, the agent's own trust functions work on another user's process; without any one
    of them, the piece of work that needs it fails (so none is kept for nothing)."""
    pid, inode = nobodys_process
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(b"dump")
    dump.chmod(0o600)
    os.chown(dump, NOBODY, NOBODY)
    caps = [c for c in unit_capabilities() if c != dropped]
    assert probe(caps, pid, inode, dump) == {**ALL_WORK, **broken}
