"""Which GPUs each host has had and which of them report now: for `fleetguard_gpu_up` (a lost GPU shows 0
instead of its series vanishing) and to label XIDs and risk with the GPU index an event or a prediction does
not carry (a kernel-log XID names a PCI bus id, a prediction a UUID)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from collectors.kmsg_classify import normalise_pci_bus_id
from fleetguard.records.telemetry import GpuSample


@dataclass(frozen=True, slots=True)
class GpuName:
    """The labels that name one GPU on /metrics."""

    host: str
    index: int
    uuid: str
    pci_bus_id: str  # normalised (0000:9b:00.0); "" if unknown

    @property
    def labels(self) -> list[str]:
        """host, gpu, uuid: the label values every per-GPU family starts with."""
        return [self.host, str(self.index), self.uuid]


def bus_key(pci_bus_id: str | None) -> str:
    """One spelling of a bus id for NVML's (00000000:9B:00.0) and the kernel's (0000:9b:00.0)."""
    if not pci_bus_id:
        return ""
    return normalise_pci_bus_id(pci_bus_id) or pci_bus_id.strip().lower()


class GpuDirectory:
    """Not thread-safe: MetricsState calls it under its lock. Bounded by the GPUs the hosts have had (a GPU
    that comes back with another UUID at the same index replaces its entry)."""

    def __init__(self) -> None:
        self._names: dict[tuple[str, int], GpuName] = {}
        self._up: dict[tuple[str, int], bool] = {}
        self._by_bus: dict[tuple[str, str], GpuName] = {}
        self._by_uuid: dict[tuple[str, str], GpuName] = {}

    def seen(self, samples: Iterable[GpuSample]) -> list[tuple[str, int]]:
        """Record one round's samples: their GPUs are up. GPUs of the same hosts that are missing from the
        round are down; returns their (host, index)."""
        reported: set[tuple[str, int]] = set()
        for s in samples:
            key = (s.host, s.gpu_index)
            reported.add(key)
            self._remember(GpuName(s.host, s.gpu_index, s.uuid, bus_key(s.pci_bus_id)))
            self._up[key] = True
        hosts = {host for host, _ in reported}
        missing = [k for k, up in self._up.items() if up and k[0] in hosts and k not in reported]
        for key in missing:
            self._up[key] = False
        return missing

    def lost(self, host: str, index: int) -> None:
        """The GPU was reported lost (fell off the bus): down until it reports again."""
        if (host, index) in self._up:
            self._up[(host, index)] = False

    def states(self) -> Iterator[tuple[GpuName, bool]]:
        for key, name in sorted(self._names.items()):
            yield name, self._up.get(key, False)

    def by_bus(self, host: str, pci_bus_id: str) -> GpuName | None:
        return self._by_bus.get((host, pci_bus_id)) if pci_bus_id else None

    def by_index(self, host: str, index: int) -> GpuName | None:
        return self._names.get((host, index))

    def by_uuid(self, host: str, uuid: str) -> GpuName | None:
        return self._by_uuid.get((host, uuid))

    def _remember(self, name: GpuName) -> None:
        old = self._names.get((name.host, name.index))
        if old == name:
            return
        if old is not None:
            self._by_bus.pop((old.host, old.pci_bus_id), None)
            self._by_uuid.pop((old.host, old.uuid), None)
        self._names[(name.host, name.index)] = name
        if name.pci_bus_id:
            self._by_bus[(name.host, name.pci_bus_id)] = name
        self._by_uuid[(name.host, name.uuid)] = name
