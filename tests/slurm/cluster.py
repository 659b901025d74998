"""A real one-node Slurm cluster on loopback for the tests: Debian's `munged`, `slurmctld` and `slurmd`, each
on its own socket or port in a temporary directory, torn down (and reaped) afterwards.

The node is `fgnode1`; `scontrol`, `sbatch` and `squeue` find the cluster through SLURM_CONF (`env`)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NODE = "fgnode1"
BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def require_slurm() -> None:
    missing = [b for b in BINARIES if not Path(_which(b)).exists()]
    if missing:
        installs = "make system-deps installs Debian's slurm-wlm and munge"
        pytest.fail(f"{', '.join(missing)} not installed ({installs})")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users: the real-Slurm tests need root (CI runs as root)")


@dataclass
class SlurmCluster:
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fgslurm-")))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    extra_config: str = ""  # lines added to slurm.conf (Prolog=, Epilog=, ...)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        for sub in ("state", "spool"):
            (self.root / sub).mkdir()
        host = socket.gethostname().split(".")[0]
        r = self.root
        # Two suites on one host (CI beside a developer's run) each start clusters: a name and job ids of
        # their own keep one cluster's jobs, state and logs from ever being taken for the other's.
        name = "fg" + r.name.rsplit("-", 1)[-1].lower().replace("_", "")
        first_job = 1000 + int.from_bytes(os.urandom(3), "big") % 1_000_000
        self.conf.write_text(
            f"ClusterName={name}\nFirstJobId={first_job}\nSlurmctldHost={host}(127.0.0.1)\n"
            f"SlurmctldPort={_free_port()}\nSlurmdPort={_free_port()}\n"
            f"AuthType=auth/munge\nAuthInfo=socket={munge / 'munge.sock'}\nCredType=cred/munge\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            f"StateSaveLocation={r / 'state'}\nSlurmdSpoolDir={r / 'spool'}\n"
            f"SlurmctldPidFile={r / 'slurmctld.pid'}\nSlurmdPidFile={r / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={r / 'slurmctld.log'}\nSlurmdLogFile={r / 'slurmd.log'}\n"
            "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\nReturnToService=2\nSchedulerType=sched/builtin\n"
            "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\nMpiDefault=none\n"
            "SlurmdParameters=config_overrides\nSlurmctldTimeout=10\nSlurmdTimeout=30\n"
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n"
            f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n" + self.extra_config
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.out").open("ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()

    def start(self) -> None:
        self._write_config()
        m = self.root / "munge"
        self._spawn(
            "munged",
            [
                _which("munged"), "-F", "--force", f"--socket={m / 'munge.sock'}",
                f"--key-file={m / 'munge.key'}", f"--log-file={m / 'munged.log'}",
                f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'seed'}",
            ],
        )  # fmt: skip
        self._wait(lambda: (m / "munge.sock").exists(), "munged")
        self.start_controller()
        self._spawn("slurmd", [_which("slurmd"), "-D", "-N", NODE, "-f", str(self.conf)])
        self._wait(lambda: "IDLE" in self.scontrol("-o", "show", "node", NODE), "slurmd")

    def start_controller(self) -> None:
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait(lambda: self._ping(), "slurmctld")

    def unreachable_conf(self) -> Path:
        """This cluster's config with slurmctld's port moved to one nothing listens on: Slurm down, as
        scontrol sees it, without stopping the cluster the rest of the module uses."""
        text = re.sub(
            r"^SlurmctldPort=\d+$", f"SlurmctldPort={_free_port()}", self.conf.read_text(), flags=re.M
        )
        down = self.root / "slurm-down.conf"
        down.write_text(text)
        return down

    def _ping(self) -> bool:
        done = subprocess.run(
            [_which("scontrol"), "ping"], env=self.env, capture_output=True, text=True, check=False
        )
        return "UP" in done.stdout

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(
            [_which("scontrol"), *args], env=self.env, capture_output=True, text=True, check=False, timeout=30
        )
        return done.stdout + done.stderr

    def sbatch(self, script: str) -> int:
        done = subprocess.run(
            [_which("sbatch"), "--parsable", "-o", str(self.root / "job-%j.out"), "--wrap", script],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return int(done.stdout.strip().split(";")[0])

    def job_state(self, job: int) -> str:
        """The job's state from squeue ('' once it has left the queue)."""
        done = subprocess.run(
            [_which("squeue"), "-h", "-j", str(job), "-o", "%T"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return done.stdout.strip()

    def log_tails(self, chars: int = 1500) -> str:
        """The end of each daemon's log: what a failed test shows, since the cluster's directory is gone
        after teardown."""
        logs = sorted([*self.root.glob("*.log"), *self.root.glob("*.out")])
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in logs)

    def _wait(self, ready: object, what: str, timeout: float = 60.0) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            proc = self.procs.get(what)
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.2)  # polling a real daemon starting: it offers no event to wait on
        raise RuntimeError(f"{what} did not start:\n{self.log_tails()}")

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            self._stop(name)
        shutil.rmtree(self.root, ignore_errors=True)
