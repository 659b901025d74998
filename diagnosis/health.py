"""The one health model: healthy / degraded / failed / silent, from open incidents and liveness (pure).

`fleetguard status`, the read API (/v1/fleet, /v1/hosts), the controller's /metrics and the dashboard all
decide a host's health here, so a terminal and a browser pointed at the same fleet say the same thing. The
rules, in order:
- a host (or part) not heard from within its silence limit is SILENT, whatever it said last: its last
  reason may be stale, and what an operator must do first is find out why it stopped talking;
- otherwise the worst open incident decides: a critical one is FAILED, any other DEGRADED. A part with an
  open incident is never HEALTHY;
- an observation of the part itself (the dashboard's reading of a GPU's or port's newest sample: throttled,
  hot, lost) may make it worse, never better.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from diagnosis.model import Severity


class Health(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"
    SILENT = "silent"


# Worst first: what an operator looks at first. A host is as bad as its worst open incident.
SEVERITY_ORDER: Final = (Health.FAILED, Health.SILENT, Health.DEGRADED, Health.HEALTHY)
_RANK: Final = {state: i for i, state in enumerate(SEVERITY_ORDER)}
_INCIDENT_RANK: Final = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}

# A host is silent once it has not been heard for this many of its flush intervals, plus a margin for a
# loaded network or controller (unless the operator configured a fixed limit).
SILENT_INTERVALS: Final = 3.0
SILENT_MARGIN_SECONDS: Final = 10.0


def silent_after(interval_seconds: float, configured_seconds: float = 0.0) -> float:
    """Seconds without a word after which a host counts as silent (controller.silent_after_seconds, or three
    of its flush intervals plus a margin when that is 0)."""
    if configured_seconds > 0:
        return configured_seconds
    return SILENT_INTERVALS * interval_seconds + SILENT_MARGIN_SECONDS


@dataclass(frozen=True, slots=True)
class Liveness:
    """How long ago the host (or part) was last heard, and after how long that counts as silent."""

    age_seconds: float
    silent_after_seconds: float

    @property
    def silent(self) -> bool:
        return self.age_seconds > self.silent_after_seconds


@dataclass(frozen=True, slots=True)
class OpenIncident:
    """What the model reads of an open (or acting) incident, and where it is."""

    incident_id: str
    host: str
    component_kind: str  # diagnosis.model.ComponentKind's value, as stored
    component_id: str  # a GPU's uuid, a port's "mlx5_0/1", a job id, the host name
    severity: Severity
    summary: str
    opened_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    health: Health
    reason: str = ""  # empty only when healthy


HEALTHY: Final = Verdict(Health.HEALTHY)


def severity_of(text: str) -> Severity:
    """A stored severity; an unknown word (a newer writer's) counts as a warning, never as nothing."""
    try:
        return Severity(text)
    except ValueError:
        return Severity.WARNING


def worst_first(incidents: Iterable[OpenIncident]) -> list[OpenIncident]:
    """Critical before warning before info; within one severity the oldest first (it has waited longest)."""
    return sorted(incidents, key=lambda i: (_INCIDENT_RANK[i.severity], i.opened_at, i.incident_id))


def judge(
    liveness: Liveness | None, incidents: Sequence[OpenIncident], observed: Verdict = HEALTHY
) -> Verdict:
    """The health of a host or part and the one reason an operator reads first. `liveness` None: nothing
    says when it was last heard (it is judged by its incidents and observation alone)."""
    if liveness is not None and liveness.silent:
        reason = f"no data for {liveness.age_seconds:.0f} s"
        if incidents:
            reason += f" ({len(incidents)} open incident{'s' if len(incidents) > 1 else ''})"
        return Verdict(Health.SILENT, reason)
    verdict = HEALTHY
    ordered = worst_first(incidents) if incidents else ()  # the fleet's parts: nearly all have none
    if ordered:
        worst = ordered[0]
        health = Health.FAILED if worst.severity is Severity.CRITICAL else Health.DEGRADED
        more = f" (+{len(ordered) - 1} more)" if len(ordered) > 1 else ""
        verdict = Verdict(health, worst.summary + more)
    if _RANK[observed.health] < _RANK[verdict.health]:
        return observed
    return verdict


def liveness_of(last_seen: float, interval_seconds: float, now: float, configured_seconds: float) -> Liveness:
    return Liveness(max(0.0, now - last_seen), silent_after(interval_seconds, configured_seconds))


def by_host(incidents: Iterable[OpenIncident]) -> dict[str, list[OpenIncident]]:
    out: dict[str, list[OpenIncident]] = {}
    for incident in incidents:
        out.setdefault(incident.host, []).append(incident)
    return out


def host_verdicts(liveness: Mapping[str, Liveness], incidents: Iterable[OpenIncident]) -> dict[str, Verdict]:
    """Each host's verdict: every host heard from, and every host with an open incident (one the store has
    no liveness for is judged by its incidents)."""
    grouped = by_host(incidents)
    return {
        host: judge(liveness.get(host), grouped.get(host, []))
        for host in sorted(set(liveness) | set(grouped))
    }


def worst(states: Iterable[Health]) -> Health:
    """The worst of the states; nothing at all is silent (there is nothing to hear from)."""
    present = set(states)
    for state in SEVERITY_ORDER:
        if state in present:
            return state
    return Health.SILENT


def rank(state: Health) -> int:
    """0 for the worst state: a sort key that lists the worst first."""
    return _RANK[state]
