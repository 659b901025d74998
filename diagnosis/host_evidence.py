"""Host evidence: what the agent itself saw of a host's hardware, which no training rank can forge.

Ranks report their own heartbeats, steps and collective counters: any local user can make those say "my GPU
stream is blocked" or "I am slow". That is enough to restart the user's own job, never to make root act on
the host (cordon, drain, reboot). A host-level action needs a fault the agent read from its own sources, the
kernel log and NVML (a hardware-class XID, a GPU fallen off the bus or lost), on a GPU the suspect rank's
process really runs on (NVML's compute processes, joined on a pid the runtime trusts) or attributed by the
kernel to that very process. NCCL logs and flight-recorder dumps are written by the ranks: not host evidence.
Pure functions over plain records.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Set
from dataclasses import dataclass

from collectors.gpu_device import GpuProcesses
from fleetguard.records.evidence import hang_evidence
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Event, EventKind

# The agent's own readers: the kernel log (root-only to write), NVML, and the simulated fleet that stands in
# for both. Not "nccl_log" (files the ranks write), nor anything a report carries.
HOST_SOURCES = frozenset({"kmsg", "nvml", "simulated"})
# A GPU gone is a fault whatever else is known; an XID counts when the catalogue calls it fatal (hardware,
# firmware, driver), never an application XID (13, 31, 43: a program's own fault, which a user can cause).
_GPU_GONE = frozenset({EventKind.GPU_FALLEN_OFF_BUS, EventKind.GPU_LOST})


@dataclass(frozen=True, slots=True)
class HostFault:
    """A hardware fault the agent saw on one of its GPUs."""

    ts: float
    kind: EventKind
    source: str
    code: int | None = None
    gpu_index: int | None = None
    pci_bus_id: str | None = None
    pid: int | None = None  # the process the kernel attributed it to, when it said

    def describe(self) -> str:
        what = f"XID {self.code}" if self.kind == EventKind.XID else self.kind.replace("_", " ")
        where = self.pci_bus_id or (f"GPU {self.gpu_index}" if self.gpu_index is not None else "a GPU")
        return f"{what} on {where} ({self.source})"


@dataclass(frozen=True, slots=True)
class HostEvidence:
    """The host faults that bear on one finding (empty: only the ranks' own reports speak for it)."""

    faults: tuple[HostFault, ...] = ()

    @property
    def corroborates(self) -> bool:
        return bool(self.faults)

    def describe(self) -> str:
        shown = "; ".join(f.describe() for f in self.faults[:3])
        more = f" and {len(self.faults) - 3} more" if len(self.faults) > 3 else ""
        return f"{shown}{more}"


NO_HOST_EVIDENCE = HostEvidence()


def host_fault(event: Event, fatal_xids: Set[int]) -> HostFault | None:
    """The event as a host fault, or None when it is not one (another source, an application XID ...)."""
    if event.source not in HOST_SOURCES:
        return None
    gone = event.kind in _GPU_GONE
    if not gone and not (event.kind == EventKind.XID and event.code in fatal_xids):
        return None
    return HostFault(
        event.ts, event.kind, event.source, event.code, event.gpu_index, event.pci_bus_id, event.pid
    )


def evidence_for(
    faults: Iterable[HostFault],
    pids: Collection[int],
    gpus: Iterable[GpuProcesses],
    since: float,
    until: float,
) -> HostEvidence:
    """The faults between `since` and `until` on a GPU one of `pids` runs on (NVML's compute processes), or
    that the kernel attributed to one of `pids`. No pid: no evidence (nothing ties a fault to the finding)."""
    wanted = set(pids)
    if not wanted:
        return NO_HOST_EVIDENCE
    used = [g for g in gpus if wanted.intersection(g.pids)]
    bus_ids = {g.pci_bus_id for g in used if g.pci_bus_id}
    indices = {g.gpu_index for g in used}

    def bears(f: HostFault) -> bool:
        if not since <= f.ts <= until:
            return False
        if f.pid is not None and f.pid in wanted:
            return True
        if f.pci_bus_id is not None:
            return f.pci_bus_id in bus_ids
        return f.gpu_index is not None and f.gpu_index in indices

    return HostEvidence(tuple(f for f in faults if bears(f)))


def suspect_ranks(finding: Finding) -> tuple[int, ...]:
    """The ranks a runtime finding blames: its rank, or a localised hang's suspects."""
    if finding.rank is not None:
        return (finding.rank,)
    return hang_evidence(finding).suspect_ranks
