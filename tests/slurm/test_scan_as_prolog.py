"""`fleetguard scan` as Slurm's prolog and epilog (docs/repair.md's snippet), in a real one-node Slurm: a
job runs on a healthy node; a node whose kernel log holds a fatal XID takes no job (the prolog fails, Slurm
drains the node and holds the job back); a job that leaves the node broken leaves it drained behind it (the
epilog fails)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleetguard.actions.slurm import SlurmNodes
from tests.slurm.cluster import NODE, SlurmCluster, require_slurm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

XID_79 = (
    "[  100.000000] NVRM: Xid (PCI:0000:9b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
)
# docs/repair.md's prolog, with the kernel log read from a file the test controls and no NVML (no GPU here)
HOOK = """#!/bin/sh
{python} -m fleetguard scan --no-nvml --kmsg-file {kmsg} >>{log} 2>&1
rc=$?
[ "$rc" -le 1 ]
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    require_slurm()
    cluster = SlurmCluster()
    kmsg = cluster.root / "kmsg.log"
    kmsg.write_text("")
    kmsg.chmod(0o666)  # the job (run as root here, but say so) appends to it in the epilog test
    hook = cluster.root / "fleetguard-prolog"
    hook.write_text(HOOK.format(python=sys.executable, kmsg=kmsg, log=cluster.root / "hook.log"))
    hook.chmod(0o755)
    cluster.extra_config = f"Prolog={hook}\nEpilog={hook}\n"
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _until(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)  # polling a real slurm cluster: it offers no event to wait on
    raise TimeoutError(what)


def _kmsg(slurm: SlurmCluster) -> Path:
    return slurm.root / "kmsg.log"


def _nodes(slurm: SlurmCluster) -> SlurmNodes:
    return SlurmNodes(slurm_conf=str(slurm.conf), timeout_seconds=15)


def _back_in_service(slurm: SlurmCluster, job: int | None = None) -> None:
    if job is not None:
        _cancel(slurm, job)
    _kmsg(slurm).write_text("")
    slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")
    _until(lambda: not _nodes(slurm).state(NODE).out_of_service, "the node back in service")


def _cancel(slurm: SlurmCluster, job: int) -> None:
    scancel = shutil.which("scancel") or "/usr/bin/scancel"
    subprocess.run([scancel, str(job)], env=slurm.env, capture_output=True, check=False, timeout=30)
    _until(lambda: slurm.job_state(job) == "", f"job {job} to leave the queue")


def test_a_healthy_node_runs_the_job(slurm: SlurmCluster) -> None:
    job = slurm.sbatch("echo ran")
    _until(lambda: slurm.job_state(job) == "", "the job to finish")
    assert (slurm.root / f"job-{job}.out").read_text().strip() == "ran"
    assert not _nodes(slurm).state(NODE).out_of_service
    assert "HEALTHY" in (slurm.root / "hook.log").read_text()


def test_a_node_with_a_fatal_xid_takes_no_job(slurm: SlurmCluster) -> None:
    _kmsg(slurm).write_text(XID_79)
    job = slurm.sbatch("echo ran")
    try:
        _until(lambda: _nodes(slurm).state(NODE).out_of_service, "the prolog to drain the node")
        state = _nodes(slurm).state(NODE)
        assert "DRAIN" in state.states and not state.ours, state  # Slurm's own reason, never resumed by us
        out = slurm.root / f"job-{job}.out"
        assert not out.exists() or "ran" not in out.read_text(), out.read_text()  # the job never ran
        # requeued and held back (Slurm's rule for a failed prolog): it runs nowhere broken
        _until(lambda: slurm.job_state(job) == "PENDING", "the job to be requeued")
        assert "CRITICAL" in (slurm.root / "hook.log").read_text()
    finally:
        _back_in_service(slurm, job)


def test_a_job_that_leaves_the_node_broken_leaves_it_drained(slurm: SlurmCluster) -> None:
    # the job's own run puts a fatal XID into the kernel log: the prolog passed, the epilog fails
    job = slurm.sbatch(f"printf '%s\\n' '{XID_79.strip()}' >> {_kmsg(slurm)}; echo ran")
    try:
        _until(lambda: _nodes(slurm).state(NODE).out_of_service, "the epilog to drain the node")
        assert (slurm.root / f"job-{job}.out").read_text().strip() == "ran"
        assert "DRAIN" in _nodes(slurm).state(NODE).states
    finally:
        _back_in_service(slurm)
