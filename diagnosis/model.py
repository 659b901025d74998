"""The vocabulary of diagnosis: severities, repair actions, components and the key that names an incident."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

# Severity is defined once, with the finding records it types; imported from here too.
from fleetguard.records.findings import Severity as Severity


def worst(a: Severity, b: Severity) -> Severity:
    return a if a.rank >= b.rank else b


class RepairAction(StrEnum):
    """What should be done; the same words as the XID catalogue's `action`."""

    NONE = "none"
    WATCH = "watch"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    DRAIN = "drain"  # take no new work; running jobs finish (Slurm: State=DRAIN)
    DOWN = "down"  # out of service now, running jobs are killed (Slurm: State=DOWN): only where a policy says
    INSPECT = "inspect"

    @property
    def acts(self) -> bool:
        """True for an action that changes something (and goes in the ledger); none/watch only observe."""
        return self not in (RepairAction.NONE, RepairAction.WATCH)


class ComponentKind(StrEnum):
    GPU = "gpu"
    PORT = "port"  # an IB / RoCE port, "mlx5_0/1"
    JOB = "job"
    HOST = "host"


@dataclass(frozen=True, slots=True, order=True)
class IncidentKey:
    """One fault of one component: (host, component, fault). All seen with the same key is one incident.

    `fault` is the rule family and its detail, e.g. "xid:79", "nic:link_downed", "row_remap:pending".
    """

    host: str
    component_kind: ComponentKind
    component_id: str
    fault: str

    @property
    def component(self) -> str:
        return f"{self.component_kind.value}:{self.component_id}"

    def text(self) -> str:
        """A stable single-string form: the incident's dedup key in the store and in alert receivers."""
        return f"{self.host}|{self.component}|{self.fault}"

    @classmethod
    def parse(cls, text: str) -> IncidentKey:
        """The inverse of `text`; ValueError for text that is not a key."""
        parts = text.split("|", 2)
        if len(parts) != 3:
            raise ValueError(f"not an incident key: {text[:100]!r}")
        host, component, fault = parts
        kind, _, ident = component.partition(":")
        return cls(host, ComponentKind(kind), ident, fault)


@dataclass(frozen=True, slots=True)
class Observation:
    """One thing a rule saw: a fault (or, with `healthy`, its absence) on one component at one time.

    The thresholds travel with the observation so the incident engine needs no policy lookups:
    - `min_count` occurrences within `window_seconds` before an incident opens;
    - `needs_company`: it opens only when it repeats (min_count) or another fault of the same component is
      open (an application XID, which alone is a user bug);
    - `sticky_seconds`: how long after the last sighting the fault still counts as present;
    - `storm_count`: so many occurrences within the window open it, even in one burst.
    """

    ts: float
    key: IncidentKey
    severity: Severity
    action: RepairAction
    rule: str
    message: str
    count: int = 1
    healthy: bool = False
    min_count: int = 1
    window_seconds: float = 0.0
    needs_company: bool = False
    sticky_seconds: float = 0.0
    storm_count: int = 0  # this many occurrences within the window open it whatever the bursts (0: off)


class Deferred(NamedTuple):
    """A healthy observation not built yet: most say nothing (their component has nothing pending or open),
    so rules mark where one would go and build it only for a component that needs it."""

    ts: float
    key: IncidentKey
    rule: str
    message: str
