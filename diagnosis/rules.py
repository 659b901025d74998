"""All rules together: records in, observations out, with the little state rules need between rounds
(the previous sample of each GPU, which PCI address is which GPU)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from diagnosis.model import Observation
from diagnosis.policy import Policy
from diagnosis.rules_events import event_observation, finding_observation
from diagnosis.rules_gpu import gpu_observations
from diagnosis.rules_nic import counter_observation, port_observations
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample

MAX_GPUS = 1_000_000  # bound on the per-GPU state a hostile or broken feed can make us keep


@dataclass(frozen=True, slots=True)
class Signals:
    """What one round brings: any mix of records, in any order."""

    events: Iterable[Event] = ()
    findings: Iterable[Finding] = ()
    gpu_samples: Iterable[GpuSample] = ()
    nic_samples: Iterable[NicSample] = ()
    nic_counters: Iterable[NicCounterSample] = ()


@dataclass(slots=True)
class Rules:
    policy: Policy
    previous: dict[tuple[str, str], GpuSample] = field(default_factory=dict)
    uuids: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, pci or "index:N") -> uuid

    def observations(self, signals: Signals) -> list[Observation]:
        """Every observation of the round, sorted by time (bursts and thresholds depend on the order)."""
        out: list[Observation] = []
        # Samples first: they teach which PCI address is which GPU before its events are keyed.
        for sample in signals.gpu_samples:
            out.extend(self._gpu(sample))
        for event in signals.events:
            obs = event_observation(event, self.policy, self.uuids)
            if obs is not None:
                out.append(obs)
        for finding in signals.findings:
            obs = finding_observation(finding, self.policy)
            if obs is not None:
                out.append(obs)
        for port in signals.nic_samples:
            out.extend(port_observations(port))
        for counter in signals.nic_counters:
            obs = counter_observation(counter, self.policy.counters)
            if obs is not None:
                out.append(obs)
        out.sort(key=lambda o: o.ts)
        return out

    def _gpu(self, sample: GpuSample) -> Iterator[Observation]:
        key = (sample.host, sample.uuid)
        previous = self.previous.get(key)
        if previous is None and len(self.previous) >= MAX_GPUS:
            self.previous.clear()
        self.previous[key] = sample
        if sample.pci_bus_id:
            self.uuids[(sample.host, sample.pci_bus_id.lower().removesuffix(".0"))] = sample.uuid
        self.uuids[(sample.host, f"index:{sample.gpu_index}")] = sample.uuid
        if len(self.uuids) > 2 * MAX_GPUS:
            self.uuids.clear()
        yield from gpu_observations(sample, previous, self.policy.gpu)
