"""An at-risk GPU names the job whose rank runs on it, and the runtime asks THAT job to checkpoint.

Real parts: the NVML collector over the scripted driver (its compute processes are real child processes of
the test), the runtime service with its rank registry and action runner, the runtime action policy.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence

import pytest

from collectors.nvml import NvmlCollector
from fleetguard.agent.gpu_jobs import GpuJobs, act_on_gpu_findings, rank_processes
from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.runtime.protocol import parse_report
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig
from tests.collectors.nvml_stub import FakeNvml, h100
from tests.runtime.helpers import report_body, root_report, sleeper

T0 = 1_700_000_000.0
TRAIN, OTHER = job_key(0, "train"), job_key(0, "other")


class Sink:
    def __init__(self) -> None:
        self.records: list[object] = []

    def __call__(self, batch: Sequence[object]) -> None:
        self.records.extend(batch)


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [sleeper() for _ in range(3)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def report(service: RuntimeService, job: str, rank: int, pid: int) -> None:
    body = report_body(
        job_id=job, rank=rank, local_rank=rank, world_size=2, pid=pid, step=5, timings=[], collectives=[]
    )
    service.handle_report(root_report(body, T0))


def at_risk(uuid: str) -> Finding:
    return Finding(
        T0,
        "f-risk",
        FindingKind.AT_RISK_GPU,
        Severity.CRITICAL,
        f"node1/{uuid}",
        f"GPU {uuid}: risk 0.9",
        "node1",
        gpu_uuid=uuid,
    )


def test_the_job_using_an_at_risk_gpu_is_named_and_asked_to_checkpoint(
    monkeypatch: pytest.MonkeyPatch, ranks: list[subprocess.Popen[bytes]]
) -> None:
    train0, train1, other0 = ranks
    gpus = [h100(0), h100(1), h100(2)]
    gpus[0].compute_pids, gpus[1].compute_pids, gpus[2].compute_pids = (
        (train0.pid,),
        (train1.pid,),
        (other0.pid,),
    )
    FakeNvml(gpus).install(monkeypatch)
    collector = NvmlCollector("node1")
    collector.collect(T0)
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), FakeClock(T0), Sink())
    report(service, "train", 0, train0.pid)
    report(service, "train", 1, train1.pid)
    report(service, "other", 0, other0.pid)

    (named,) = act_on_gpu_findings([at_risk(gpus[1].uuid)], GpuJobs([collector]), service)

    assert (named.job_id, named.rank, named.gpu_uuid) == (TRAIN, 1, gpus[1].uuid)
    assert f"used by job {TRAIN} (rank 1 on GPU 1)" in named.summary
    [(finding, requests)] = service.take_planned()
    assert finding == named
    assert [(r.action, r.job_id) for r in requests] == [("checkpoint", TRAIN)]
    records = service.run_actions(requests)
    assert [(r.action, r.outcome) for r in records] == [("checkpoint", "requested")]
    assert [c.kind for c in service.commands.take(TRAIN, 0)] == ["checkpoint"]
    assert service.commands.take(OTHER, 0) == []  # the job on the healthy GPU is left alone
    assert service.take_planned() == []


def test_without_a_runtime_or_a_rank_on_the_gpu_the_finding_is_stored_as_it_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = h100(0)
    gpu.compute_pids = (4242,)  # a process no rank reported
    FakeNvml([gpu]).install(monkeypatch)
    collector = NvmlCollector("node1")
    collector.collect(T0)
    finding = at_risk(gpu.uuid)
    assert act_on_gpu_findings([finding], GpuJobs([collector]), None) == [finding]
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), FakeClock(T0), Sink())
    assert act_on_gpu_findings([finding], GpuJobs([collector]), service) == [finding]
    assert service.take_planned() == []


def test_only_pids_the_runtime_trusts_take_part(ranks: list[subprocess.Popen[bytes]]) -> None:
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), FakeClock(T0), Sink())
    report(service, "train", 0, ranks[0].pid)
    untrusted = report_body(job_id="train", rank=1, local_rank=1, world_size=2, pid=ranks[1].pid, step=1)
    service.handle_report(parse_report(untrusted, "node1", T0, owner_uid=0))  # no process identified
    assert [(r.job_id, r.rank, r.pid) for r in rank_processes(service.ranks)] == [(TRAIN, 0, ranks[0].pid)]
