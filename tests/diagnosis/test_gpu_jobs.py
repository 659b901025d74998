"""GPU <-> process <-> job: the join of NVML's compute processes with the ranks' pids, and findings named."""

from __future__ import annotations

import dataclasses
import json

from collectors.gpu_device import GpuProcesses
from diagnosis.gpu_jobs import (
    GpuUsage,
    JobOnGpu,
    RankProcess,
    attribute_finding,
    attribute_findings,
    join_gpu_jobs,
    usage_of,
)
from fleetguard.records.findings import Finding, FindingKind, Severity

UUID = ["GPU-aaaa-0", "GPU-aaaa-1", "GPU-aaaa-2"]
GPUS = [
    GpuProcesses(UUID[0], 0, "0000:18:00.0", (1001,)),
    GpuProcesses(UUID[1], 1, "0000:2a:00.0", (1002, 7777)),  # 7777: a notebook no rank reported
    GpuProcesses(UUID[2], 2, "0000:3a:00.0", ()),
]
RANKS = [
    RankProcess("1000/train", 0, 1001),
    RankProcess("1000/train", 1, 1002),
    RankProcess("1001/eval", 0, 5005),  # runs on no GPU NVML sees (CPU, or another host's)
]


def at_risk(uuid: str, **changes: object) -> Finding:
    finding = Finding(
        ts=1.0,
        finding_id="f-1",
        kind=FindingKind.AT_RISK_GPU,
        severity=Severity.CRITICAL,
        subject=f"h/{uuid}",
        summary=f"GPU {uuid} on h: failure risk 0.91 within 24 h",
        host="h",
        gpu_uuid=uuid,
        evidence_json='{"risk": 0.91}',
    )
    return dataclasses.replace(finding, **changes)  # type: ignore[arg-type]


def test_each_gpu_names_the_job_and_ranks_whose_processes_run_on_it() -> None:
    usages = join_gpu_jobs(GPUS, RANKS)
    assert usages == [
        GpuUsage(UUID[0], 0, "0000:18:00.0", (JobOnGpu("1000/train", (0,), (1001,)),), ()),
        GpuUsage(UUID[1], 1, "0000:2a:00.0", (JobOnGpu("1000/train", (1,), (1002,)),), (7777,)),
        GpuUsage(UUID[2], 2, "0000:3a:00.0", (), ()),
    ]


def test_two_jobs_sharing_a_gpu_and_one_job_with_two_ranks_on_it() -> None:
    gpus = [GpuProcesses(UUID[0], 0, None, (30, 10, 20))]
    ranks = [RankProcess("b", 3, 30), RankProcess("a", 1, 20), RankProcess("a", 0, 10)]
    (usage,) = join_gpu_jobs(gpus, ranks)
    assert usage.jobs == (JobOnGpu("a", (0, 1), (10, 20)), JobOnGpu("b", (3,), (30,)))


def test_a_pid_claimed_twice_counts_once_for_the_first_job_and_rank() -> None:
    (usage,) = join_gpu_jobs(
        [GpuProcesses(UUID[0], 0, None, (42,))], [RankProcess("b", 0, 42), RankProcess("a", 2, 42)]
    )
    assert usage.jobs == (JobOnGpu("a", (2,), (42,)),)


def test_a_gpu_is_found_by_uuid_bus_id_or_index_as_findings_and_events_name_it() -> None:
    usages = join_gpu_jobs(GPUS, RANKS)
    assert usage_of(usages, uuid=UUID[1]) is usages[1]
    assert usage_of(usages, pci_bus_id="0000:3a:00.0") is usages[2]
    assert usage_of(usages, gpu_index=0) is usages[0]
    assert usage_of(usages, uuid="GPU-gone") is None
    assert usage_of(usages) is None


def test_an_at_risk_gpu_finding_names_the_job_and_rank_using_it() -> None:
    (named,) = attribute_finding(at_risk(UUID[1]), join_gpu_jobs(GPUS, RANKS))
    assert (named.finding_id, named.job_id, named.rank, named.gpu_uuid) == ("f-1", "1000/train", 1, UUID[1])
    assert named.summary.endswith("; used by job 1000/train (rank 1 on GPU 1)")
    assert json.loads(named.evidence_json) == {
        "risk": 0.91,
        "gpu_jobs": [{"job_id": "1000/train", "ranks": [1], "pids": [1002]}],
        "gpu_other_pids": [7777],
    }


def test_a_gpu_two_jobs_use_gives_one_finding_per_job_with_distinct_ids() -> None:
    gpus = [GpuProcesses(UUID[0], 0, None, (10, 30))]
    usages = join_gpu_jobs(gpus, [RankProcess("a", 0, 10), RankProcess("b", 0, 30)])
    named = attribute_finding(at_risk(UUID[0]), usages)
    assert [f.job_id for f in named] == ["a", "b"]
    assert len({f.finding_id for f in named}) == 2 and "f-1" not in {f.finding_id for f in named}
    assert named == attribute_finding(at_risk(UUID[0]), usages)  # ids are stable


def test_findings_no_job_can_be_named_for_are_left_as_they_are() -> None:
    usages = join_gpu_jobs(GPUS, RANKS)
    idle = at_risk(UUID[2])
    unknown = at_risk("GPU-not-on-this-host")
    already = at_risk(UUID[0], job_id="other", rank=4)
    no_gpu = at_risk(UUID[0], gpu_uuid=None)
    assert attribute_findings([idle, unknown, already, no_gpu], usages) == [idle, unknown, already, no_gpu]


def test_evidence_that_is_not_a_json_object_is_kept_beside_the_jobs() -> None:
    (named,) = attribute_finding(at_risk(UUID[0], evidence_json="not json"), join_gpu_jobs(GPUS, RANKS))
    evidence = json.loads(named.evidence_json)
    assert evidence["evidence"] == "not json" and evidence["gpu_jobs"][0]["job_id"] == "1000/train"
