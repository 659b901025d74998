"""Which job uses which GPU: the compute processes NVML sees on each GPU joined with the ranks' pids.

Pure functions over plain records. The GPU side comes from the GPU collector
(`collectors.gpu_device.GpuProcesses`, nvmlDeviceGetComputeRunningProcesses), the rank side from the training
runtime: only pids the runtime trusts (they belong to the rank that reported them) take part, so a report
cannot claim someone else's GPU. Both sides are pids of the agent's pid namespace.

A finding about a GPU (an at-risk prediction, a fault) becomes a finding about each job using it: job_id and
rank are filled in, the summary names the job and its ranks, and the evidence lists them, so the runtime's
action (checkpoint) goes to that job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from collectors.gpu_device import GpuProcesses
from fleetguard.records.evidence import with_more_evidence
from fleetguard.records.findings import Finding


@dataclass(frozen=True, slots=True)
class RankProcess:
    """A live rank of a job on this host and its (trusted) pid."""

    job_id: str
    rank: int
    pid: int


@dataclass(frozen=True, slots=True)
class JobOnGpu:
    job_id: str
    ranks: tuple[int, ...]  # sorted
    pids: tuple[int, ...]  # of those ranks, in rank order


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One GPU, the jobs whose ranks run on it, and compute processes no reporting rank owns."""

    uuid: str
    gpu_index: int
    pci_bus_id: str | None
    jobs: tuple[JobOnGpu, ...]  # sorted by job id
    other_pids: tuple[int, ...]


def join_gpu_jobs(gpus: Iterable[GpuProcesses], ranks: Iterable[RankProcess]) -> list[GpuUsage]:
    """Every GPU with the jobs using it. A pid two ranks claim (a stale report) counts for the lower rank."""
    by_pid: dict[int, RankProcess] = {}
    for r in sorted(ranks, key=lambda r: (r.job_id, r.rank)):
        by_pid.setdefault(r.pid, r)
    usages = []
    for gpu in gpus:
        jobs: dict[str, list[RankProcess]] = {}
        others = []
        for pid in gpu.pids:
            owner = by_pid.get(pid)
            if owner is None:
                others.append(pid)
            else:
                jobs.setdefault(owner.job_id, []).append(owner)
        on_gpu = tuple(_job_on_gpu(job_id, rs) for job_id, rs in sorted(jobs.items()))
        usages.append(GpuUsage(gpu.uuid, gpu.gpu_index, gpu.pci_bus_id, on_gpu, tuple(sorted(others))))
    return usages


def _job_on_gpu(job_id: str, ranks: list[RankProcess]) -> JobOnGpu:
    ordered = sorted(ranks, key=lambda r: r.rank)
    return JobOnGpu(job_id, tuple(r.rank for r in ordered), tuple(r.pid for r in ordered))


def usage_of(
    usages: Sequence[GpuUsage],
    *,
    uuid: str | None = None,
    gpu_index: int | None = None,
    pci_bus_id: str | None = None,
) -> GpuUsage | None:
    """The GPU a finding or event names: by UUID, else PCI bus id (kernel-log XIDs), else NVML index."""
    for key, value in (("uuid", uuid), ("pci_bus_id", pci_bus_id), ("gpu_index", gpu_index)):
        if value is None:
            continue
        for usage in usages:
            if getattr(usage, key) == value:
                return usage
        return None
    return None


def attribute_finding(finding: Finding, usages: Sequence[GpuUsage]) -> list[Finding]:
    """The finding once per job using its GPU, naming the job and its ranks; unchanged when it already names
    a job, names no GPU, or no job uses the GPU. One job keeps the finding's id; several get derived ids."""
    if finding.job_id is not None or finding.gpu_uuid is None:
        return [finding]
    usage = usage_of(usages, uuid=finding.gpu_uuid)
    if usage is None or not usage.jobs:
        return [finding]
    several = len(usage.jobs) > 1
    return [_for_job(finding, usage, job, derive_id=several) for job in usage.jobs]


def attribute_findings(findings: Iterable[Finding], usages: Sequence[GpuUsage]) -> list[Finding]:
    return [out for finding in findings for out in attribute_finding(finding, usages)]


def _for_job(finding: Finding, usage: GpuUsage, job: JobOnGpu, *, derive_id: bool) -> Finding:
    ranks = ", ".join(str(r) for r in job.ranks)
    finding_id = finding.finding_id
    if derive_id:
        finding_id = f"{finding.finding_id}/job/{job.job_id}"  # one per job (records.findings.finding_id)
    return replace(
        finding,
        finding_id=finding_id,
        job_id=job.job_id,
        rank=job.ranks[0],
        summary=f"{finding.summary}; used by job {job.job_id} (rank{'s' if len(job.ranks) > 1 else ''} "
        f"{ranks} on GPU {usage.gpu_index})",
        evidence_json=_with_jobs(finding.evidence_json, usage),
    )


def _with_jobs(evidence_json: str, usage: GpuUsage) -> str:
    jobs = [{"job_id": j.job_id, "ranks": list(j.ranks), "pids": list(j.pids)} for j in usage.jobs]
    return with_more_evidence(evidence_json, {"gpu_jobs": jobs, "gpu_other_pids": list(usage.other_pids)})
