"""The fleet as the pages show it: every GPU, port and host with its health, from the query rows (pure).

Health is the one model of `diagnosis.health` (as in `fleetguard status` and the read API): a host's from its
liveness and open incidents; a GPU's or port's from its host's liveness, its own open incidents and what its
newest sample shows (`dashboard.health`), which can only make it worse."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from dashboard.health import SILENT_AFTER_SECONDS, GpuSignals, PortSignals, gpu_health, port_health
from dashboard.queries.events import EventCount
from dashboard.queries.gpus import GpuState
from dashboard.queries.network import PortCounters, PortState
from diagnosis.health import (
    HEALTHY,
    Health,
    Liveness,
    OpenIncident,
    Verdict,
    by_host,
    host_verdicts,
    judge,
    liveness_of,
    rank,
)

_LOST_KINDS = frozenset({"gpu_lost", "gpu_fallen_off_bus"})


@dataclass(frozen=True, slots=True)
class XidClasses:
    fatal: frozenset[int]
    application: frozenset[int]


@functools.cache
def xid_classes() -> XidClasses:
    """From the shipped XID catalogue; an unreadable catalogue makes every XID a plain (degrading) one."""
    try:
        from collectors.xid_catalog import load_xid_catalog

        entries = load_xid_catalog()
    except Exception:
        return XidClasses(frozenset(), frozenset())
    return XidClasses(
        frozenset(e.xid for e in entries if e.fatal),
        frozenset(e.xid for e in entries if e.error_class == "application"),
    )


@dataclass(frozen=True, slots=True)
class GpuView:
    state: GpuState
    health: Health
    reason: str
    risk: float | None
    xids: int  # every XID in the window, application ones included


@dataclass(frozen=True, slots=True)
class PortView:
    state: PortState
    counters: PortCounters | None
    health: Health
    reason: str


@dataclass(slots=True)
class HostView:
    host: str
    health: Health = Health.SILENT
    reason: str = ""
    last_ts: float = 0.0
    gpus: list[GpuView] = field(default_factory=list)
    ports: list[PortView] = field(default_factory=list)
    incidents: list[OpenIncident] = field(default_factory=list)

    def gpu_counts(self) -> Counter[Health]:
        return Counter(g.health for g in self.gpus)


@dataclass(frozen=True, slots=True)
class _GpuFaults:
    lost: bool = False
    fatal: int = 0
    other: int = 0
    all_xids: int = 0


def _faults_by_gpu(events: Iterable[EventCount]) -> dict[tuple[str, int | str], _GpuFaults]:
    """Keyed by (host, GPU index) where the event names the index, else by (host, PCI bus id)."""
    classes = xid_classes()
    acc: dict[tuple[str, int | str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for e in events:
        key: int | str | None = e.gpu_index if e.gpu_index is not None else e.pci_bus_id
        if key is None:
            continue
        slot = acc[(e.host, key)]
        if e.kind in _LOST_KINDS:
            slot[0] += e.count
        elif e.kind == "xid" and e.code is not None:
            slot[3] += e.count
            if e.code in classes.fatal:
                slot[1] += e.count
            elif e.code not in classes.application:
                slot[2] += e.count
    return {k: _GpuFaults(v[0] > 0, v[1], v[2], v[3]) for k, v in acc.items()}


_NO_FAULTS: Final = _GpuFaults()


def _verdict(health: Health, reason: str) -> Verdict:
    """What a part's own sample shows, the one HEALTHY verdict for the fleet's many healthy parts."""
    return HEALTHY if health is Health.HEALTHY and not reason else Verdict(health, reason)


def _merge(a: _GpuFaults | None, b: _GpuFaults | None) -> _GpuFaults:
    if a is None or b is None:
        return a or b or _GpuFaults()
    return _GpuFaults(a.lost or b.lost, a.fatal + b.fatal, a.other + b.other, a.all_xids + b.all_xids)


def gpu_views(
    states: Sequence[GpuState],
    events: Iterable[EventCount],
    risk_by_uuid: Mapping[str, float],
    now: float,
    threshold: float,
    incidents: Sequence[OpenIncident] = (),
    liveness: Mapping[str, Liveness] | None = None,
) -> list[GpuView]:
    """`incidents` the open ones (those of a GPU name its uuid); `liveness` each host's (hosts_liveness)."""
    faults = _faults_by_gpu(events)
    mine = _by_component(incidents, "gpu")
    live = liveness or {}
    out = []
    for s in states:
        by_index, by_bus = faults.get((s.host, s.gpu_index)), faults.get((s.host, s.pci_bus_id or ""))
        f = _NO_FAULTS if by_index is None and by_bus is None else _merge(by_index, by_bus)
        risk = risk_by_uuid.get(s.uuid)
        signals = GpuSignals(
            age_seconds=now - s.last_ts,
            lost=f.lost,
            fatal_xids=f.fatal,
            other_xids=f.other,
            ecc_uncorrected_volatile=s.ecc_uncorrected_volatile,
            remapped_rows_failure=s.remapped_rows_failure,
            remapped_rows_pending=s.remapped_rows_pending,
            clocks_event_reasons=s.clocks_event_reasons,
            temperature_celsius=s.temperature_celsius,
            risk=risk,
            risk_threshold=threshold,
        )
        verdict = judge(live.get(s.host), mine.get((s.host, s.uuid), ()), _verdict(*gpu_health(signals)))
        out.append(GpuView(s, verdict.health, verdict.reason, risk, f.all_xids))
    return out


def port_views(
    states: Sequence[PortState],
    counters: Iterable[PortCounters],
    now: float,
    incidents: Sequence[OpenIncident] = (),
    liveness: Mapping[str, Liveness] | None = None,
) -> list[PortView]:
    by_port = {(c.host, c.device, c.port): c for c in counters}
    mine = _by_component(incidents, "port")
    live = liveness or {}
    out = []
    for s in states:
        c = by_port.get((s.host, s.device, s.port))
        observed = port_health(
            PortSignals(
                age_seconds=now - s.last_ts,
                state=s.state,
                link_downed_delta=c.link_downed if c else 0,
                error_delta=c.errors if c else 0,
            )
        )
        part = mine.get((s.host, f"{s.device}/{s.port}"), ()) if mine else ()
        verdict = judge(live.get(s.host), part, _verdict(*observed))
        out.append(PortView(s, c, verdict.health, verdict.reason))
    return out


def _by_component(incidents: Sequence[OpenIncident], kind: str) -> dict[tuple[str, str], list[OpenIncident]]:
    out: dict[tuple[str, str], list[OpenIncident]] = {}
    for i in incidents:
        if i.component_kind == kind:
            out.setdefault((i.host, i.component_id), []).append(i)
    return out


def hosts_liveness(
    seen: Iterable[tuple[str, float, float]], now: float, configured_silent_seconds: float
) -> dict[str, Liveness]:
    """Each host's liveness from (host, last seen, flush interval), as the read API decides it."""
    return {
        host: liveness_of(last, interval, now, configured_silent_seconds) for host, last, interval in seen
    }


def host_views(
    gpus: Iterable[GpuView],
    ports: Iterable[PortView],
    incidents: Sequence[OpenIncident] = (),
    liveness: Mapping[str, Liveness] | None = None,
    now: float | None = None,
) -> list[HostView]:
    """Hosts sorted worst first, then by name: every host with a GPU or port in view, every host the store
    has heard from (`liveness`) and every host with an open incident.

    A host's health is `diagnosis.health`'s verdict on its liveness and open incidents, the one the read API
    and `fleetguard status` give. A host the store keeps no liveness for (a store no controller ingest
    wrote) is judged by the age of its newest sample. What a part's own sample shows (hot, throttled) colours
    that part; the host row counts such parts beside its health."""
    hosts: dict[str, HostView] = {}
    for g in gpus:
        h = hosts.setdefault(g.state.host, HostView(g.state.host))
        h.gpus.append(g)
        h.last_ts = max(h.last_ts, g.state.last_ts)
    for p in ports:
        h = hosts.setdefault(p.state.host, HostView(p.state.host))
        h.ports.append(p)
        h.last_ts = max(h.last_ts, p.state.last_ts)
    known = dict(liveness or {})
    for host, h in hosts.items():
        if host not in known and now is not None and h.last_ts > 0:
            known[host] = Liveness(max(0.0, now - h.last_ts), SILENT_AFTER_SECONDS)
    grouped = by_host(incidents)
    for host, verdict in host_verdicts(known, incidents).items():
        h = hosts.setdefault(host, HostView(host))
        h.health, h.reason = verdict.health, verdict.reason
        h.incidents = grouped.get(host, [])
        if host in (liveness or {}) and now is not None:
            h.last_ts = max(h.last_ts, now - known[host].age_seconds)
    return sorted(hosts.values(), key=lambda h: (rank(h.health), h.host))


def _label(part: GpuView | PortView) -> str:
    if isinstance(part, GpuView):
        return f"GPU {part.state.gpu_index}: {part.reason}"
    return f"{part.state.device}/{part.state.port}: {part.reason}"
