"""The agent's hook for GPU <-> process <-> job: the GPU collectors' compute processes joined (by
`diagnosis.gpu_jobs`) with the training runtime's ranks, so a finding about a GPU names the job using it.

`up` builds one from its collectors, attaches the runtime's rank registry once the runtime has started, and
passes at-risk findings through `attribute` before storing them and handing them to the runtime's planner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from collectors.gpu_device import GpuProcesses
from diagnosis.gpu_jobs import GpuUsage, RankProcess, attribute_findings, join_gpu_jobs
from fleetguard.records.findings import Finding


@runtime_checkable
class ProcessSource(Protocol):
    """A GPU collector that knows the compute processes on its GPUs (NVML, simulated)."""

    def gpu_processes(self) -> list[GpuProcesses]: ...


class RankSource(Protocol):
    """The runtime's rank registry, as far as this needs it (fleetguard.runtime.ranks.RankRegistry)."""

    def jobs(self) -> list[str]: ...

    def live_pids(self, job_id: str) -> dict[int, int]:
        """{rank: pid} of live ranks whose pid is trusted (belongs to the rank that reported it)."""


def rank_processes(ranks: RankSource) -> list[RankProcess]:
    return [
        RankProcess(job_id, rank, pid)
        for job_id in ranks.jobs()
        for rank, pid in ranks.live_pids(job_id).items()
    ]


class GpuJobs:
    """Thread-safe: the runtime attaches on its start-up thread, scoring reads on its own."""

    def __init__(self, collectors: Iterable[object]) -> None:
        self._sources = [c for c in collectors if isinstance(c, ProcessSource)]
        self._ranks: RankSource | None = None
        self._lock = threading.Lock()

    def attach_ranks(self, ranks: RankSource) -> None:
        with self._lock:
            self._ranks = ranks

    def usages(self) -> list[GpuUsage]:
        with self._lock:
            ranks = self._ranks
        gpus = [g for source in self._sources for g in source.gpu_processes()]
        return join_gpu_jobs(gpus, rank_processes(ranks) if ranks is not None else [])

    def attribute(self, findings: Sequence[Finding]) -> list[Finding]:
        """Each GPU finding once per job using that GPU (job and ranks named); others as they are."""
        if not findings:
            return []
        return attribute_findings(findings, self.usages())


class RuntimePlanner(Protocol):
    """The runtime service as this needs it (fleetguard.runtime.service.RuntimeService)."""

    @property
    def ranks(self) -> RankSource: ...

    def plan_findings(self, findings: Sequence[Finding]) -> int: ...


def act_on_gpu_findings(
    findings: Sequence[Finding], gpu_jobs: GpuJobs, runtime: RuntimePlanner | None
) -> list[Finding]:
    """Name the job using each finding's GPU and hand those findings to the runtime's planner, which asks
    that job to checkpoint (at-risk GPU); returns the findings to store. No runtime: no job is named."""
    if runtime is not None:
        gpu_jobs.attach_ranks(runtime.ranks)
    named = gpu_jobs.attribute(findings)
    if runtime is not None:
        runtime.plan_findings([f for f in named if f.job_id is not None])
    return named
