"""All rules together: records in, observations out, with the little state rules need between rounds
(the previous sample of each GPU, which PCI address is which GPU)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

from diagnosis.model import ComponentKind, Deferred, Observation, RepairAction, Severity
from diagnosis.policy import Policy
from diagnosis.rules_events import event_observation, finding_observation
from diagnosis.rules_gpu import gpu_observations
from diagnosis.rules_nic import counter_observation, port_observations
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample

MAX_GPUS = 1_000_000  # bound on the per-GPU state a hostile or broken feed can make us keep


@dataclass(frozen=True, slots=True)
class Reading:
    """A component was read at `ts` and said nothing a rule looks at (a port's counters that did not move):
    a reader may pass this instead of the records themselves."""

    host: str
    component: str  # "port:<device>/<port>", as `IncidentKey.component`
    ts: float


@dataclass(frozen=True, slots=True)
class Signals:
    """What one round brings: any mix of records, in any order."""

    events: Iterable[Event] = ()
    findings: Iterable[Finding] = ()
    gpu_samples: Iterable[GpuSample] = ()
    nic_samples: Iterable[NicSample] = ()
    nic_counters: Iterable[NicCounterSample] = ()
    readings: Iterable[Reading] = ()


@dataclass(slots=True)
class Rules:
    policy: Policy
    previous: dict[tuple[str, str], GpuSample] = field(default_factory=dict)
    uuids: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, pci or "index:N") -> uuid
    # When each GPU / port was last read at all: a fault read from samples is healthy only once a later
    # reading says so, not merely because no reading came (a lost GPU, a sparse history).
    read_at: dict[tuple[str, str], float] = field(default_factory=dict)  # (host, "gpu:uuid"|"port:dev/p")
    heard: set[str] = field(default_factory=set)  # hosts of healthy observations left out (`observations`)

    def observations(
        self, signals: Signals, busy: Collection[tuple[str, ComponentKind, str]] | None = None
    ) -> list[Observation]:
        """Every observation of the round, sorted by time (bursts and thresholds depend on the order).

        With `busy` (the components with something pending or open), a healthy observation is left out
        when neither that set nor this round's faults name its component: it would change nothing but the
        hosts heard from, which go to `heard` instead. Building the ~3 per sample that say "still fine" was
        most of a round's cost."""
        defer = busy is not None
        out: list[Observation | Deferred] = []
        # Samples first: they teach which PCI address is which GPU before its events are keyed.
        for sample in signals.gpu_samples:
            out.extend(self._gpu(sample, defer))
        for event in signals.events:
            obs = event_observation(event, self.policy, self.uuids)
            if obs is not None:
                out.append(obs)
        for finding in signals.findings:
            obs = finding_observation(finding, self.policy)
            if obs is not None:
                out.append(obs)
        for port in signals.nic_samples:
            out.extend(port_observations(port, defer))
        for counter in signals.nic_counters:
            self._read((counter.host, f"port:{counter.device}/{counter.port}"), counter.ts)
            obs = counter_observation(counter, self.policy.counters)
            if obs is not None:
                out.append(obs)
        for reading in signals.readings:
            self._read((reading.host, reading.component), reading.ts)
        built = self._build_deferred(out, busy) if busy is not None else out
        built.sort(key=lambda o: o.ts)
        return built  # type: ignore[return-value]  # no Deferred is left in it

    def _build_deferred(
        self, out: list[Observation | Deferred], busy: Collection[tuple[str, ComponentKind, str]]
    ) -> list[Observation | Deferred]:
        """The deferred healthy observations of busy components built in their places; the rest dropped."""
        hot = set(busy)
        hot.update(
            (o.key.host, o.key.component_kind, o.key.component_id)
            for o in out
            if isinstance(o, Observation) and not o.healthy
        )
        built: list[Observation | Deferred] = []
        for o in out:
            if isinstance(o, Observation):
                built.append(o)
            elif (o.key.host, o.key.component_kind, o.key.component_id) in hot:
                built.append(
                    Observation(
                        o.ts, o.key, Severity.INFO, RepairAction.NONE, o.rule, o.message, healthy=True
                    )
                )
            else:
                self.heard.add(o.key.host)
        return built

    def _gpu(self, sample: GpuSample, defer: bool = False) -> Iterator[Observation | Deferred]:
        key = (sample.host, sample.uuid)
        previous = self.previous.get(key)
        if previous is None and len(self.previous) >= MAX_GPUS:
            self.previous.clear()
        if previous is None or sample.ts >= previous.ts:
            # A late sample (older than the one kept) says nothing about what changed since: keeping it
            # would count the increase up to the newer one a second time.
            self.previous[key] = sample
        self._read((sample.host, f"gpu:{sample.uuid}"), sample.ts)
        if sample.pci_bus_id:
            self.uuids[(sample.host, sample.pci_bus_id.lower().removesuffix(".0"))] = sample.uuid
        self.uuids[(sample.host, f"index:{sample.gpu_index}")] = sample.uuid
        if len(self.uuids) > 2 * MAX_GPUS:
            self.uuids.clear()
        yield from gpu_observations(sample, previous, self.policy.gpu, defer)

    def _read(self, component: tuple[str, str], ts: float) -> None:
        if component not in self.read_at and len(self.read_at) >= 2 * MAX_GPUS:
            self.read_at.clear()
        if ts > self.read_at.get(component, float("-inf")):
            self.read_at[component] = ts

    def restore(self, samples: Iterable[GpuSample], readings: Iterable[Reading]) -> None:
        """Take back, after a restart, each GPU's newest sample and when each component was last read."""
        for sample in samples:
            self.previous.pop((sample.host, sample.uuid), None)
            for _ in self._gpu(sample, defer=True):
                pass  # only the state: what the sample said was said before the restart
        for reading in readings:
            self._read((reading.host, reading.component), reading.ts)

    def read_since(self, host: str, component: str, since: float) -> float | None:
        """The time of the latest reading of `component` after `since`, or None when none came."""
        ts = self.read_at.get((host, component))
        return ts if ts is not None and ts > since else None
