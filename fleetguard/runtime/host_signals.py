"""The agent's own hardware signals, kept for the training runtime's host-level decisions.

The agent hands every round's events here (kernel log, NVML); the faults among them (diagnosis.host_evidence)
are kept for an hour, bounded. When a runtime finding could lead to a host action (cordon), the runtime asks
which of them bear on the suspect ranks' processes: on their GPUs, as NVML lists each GPU's compute
processes, or attributed to them by the kernel.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Collection, Iterable, Sequence, Set

from collectors.xid_catalog import XidCatalogError, load_xid_catalog
from diagnosis.host_evidence import HostEvidence, HostFault, evidence_for, host_fault
from fleetguard.agent.gpu_jobs import ProcessSource
from fleetguard.records.telemetry import Event

log = logging.getLogger(__name__)

MAX_FAULTS = 4096  # a storm of one XID is folded upstream; this bounds what is kept whatever arrives
KEEP_SECONDS = 3600.0


def fatal_xids() -> frozenset[int]:
    """The XIDs the catalogue calls fatal (hardware, firmware, driver): the ones that are host evidence.
    An unreadable catalogue leaves none: then only a GPU off the bus or lost is (and the agent says so)."""
    try:
        return frozenset(e.xid for e in load_xid_catalog() if e.fatal)
    except XidCatalogError as exc:
        log.error("no XID counts as host evidence for runtime host actions: %s", exc)
        return frozenset()


class HostSignals:
    """Thread-safe: the agent's sampling thread observes, the runtime's tick thread asks."""

    def __init__(
        self,
        process_sources: Sequence[ProcessSource],
        fatal: Set[int],
        *,
        max_faults: int = MAX_FAULTS,
        keep_seconds: float = KEEP_SECONDS,
    ) -> None:
        self._sources = list(process_sources)
        self._fatal = frozenset(fatal)
        self._faults: deque[HostFault] = deque(maxlen=max_faults)
        self._keep_seconds = keep_seconds
        self._lock = threading.Lock()

    @classmethod
    def of(cls, collectors: Iterable[object]) -> HostSignals:
        """From the agent's collectors (those that list the processes on their GPUs) and the catalogue."""
        return cls([c for c in collectors if isinstance(c, ProcessSource)], fatal_xids())

    def observe(self, events: Sequence[Event]) -> None:
        faults = [f for e in events if (f := host_fault(e, self._fatal)) is not None]
        if not faults:
            return
        with self._lock:
            self._faults.extend(faults)
            newest = max(f.ts for f in self._faults)
            while self._faults and self._faults[0].ts < newest - self._keep_seconds:
                self._faults.popleft()

    def evidence(self, pids: Collection[int], since: float, until: float) -> HostEvidence:
        if not pids:
            return HostEvidence()
        with self._lock:
            faults = list(self._faults)
        if not faults:
            return HostEvidence()
        gpus = []
        for source in self._sources:
            try:
                gpus.extend(source.gpu_processes())
            except Exception as exc:  # a collector's trouble costs the evidence, never the runtime's tick
                log.warning("compute processes could not be read: %s", exc)
        return evidence_for(faults, pids, gpus, since, until)
