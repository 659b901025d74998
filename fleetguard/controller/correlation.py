"""Fleet correlation: the same fault on many hosts at once is one fleet-level finding (a driver, firmware or
fabric problem), not N host findings. Pure: events in, groups out; the task below reads and writes the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import duckdb

from fleetguard.controller.columns import insert_records
from fleetguard.records.evidence import FleetFaultEvidence, evidence_json, fleet_fault_evidence
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.telemetry import EventKind

# Faults whose appearance on many hosts at once points at something they share.
FLEET_KINDS = (
    EventKind.XID,
    EventKind.SXID,
    EventKind.LINK_DOWN,
    EventKind.GPU_FALLEN_OFF_BUS,
    EventKind.NIC_OVER_TEMPERATURE,
    EventKind.PCIE_AER,
)
MAX_HOSTS_IN_EVIDENCE = 200
# Application XIDs (illegal address, MMU fault from a kernel, page fault, robust channel preemption): one
# multi-node job's bug raises them on all its hosts at once. They say nothing about the fleet.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})


@dataclass(frozen=True)
class FleetEvent:
    ts: float
    host: str
    kind: str
    code: int | None
    count: int


@dataclass(frozen=True)
class FleetFault:
    kind: str
    code: int | None
    hosts: tuple[str, ...]
    first_ts: float
    last_ts: float
    occurrences: int

    @property
    def signature(self) -> str:
        return f"{self.kind}:{self.code if self.code is not None else '-'}"


def correlate(events: Iterable[FleetEvent], min_hosts: int) -> list[FleetFault]:
    """Group events by (kind, code); a group seen on at least `min_hosts` distinct hosts is a fleet fault."""
    groups: dict[tuple[str, int | None], list[FleetEvent]] = {}
    for e in events:
        if e.kind == EventKind.XID and e.code in APPLICATION_XIDS:
            continue
        groups.setdefault((e.kind, e.code), []).append(e)
    faults = []
    for (kind, code), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
        hosts = tuple(sorted({e.host for e in members}))
        if len(hosts) >= min_hosts:
            faults.append(
                FleetFault(
                    kind,
                    code,
                    hosts,
                    min(e.ts for e in members),
                    max(e.ts for e in members),
                    sum(e.count for e in members),
                )
            )
    return faults


class FleetCorrelation:
    """The periodic task over the events of the last `window_seconds`. A fleet fault is reported once per
    episode (it ends when the fault has not been seen for a window), as a `fleet_fault` naming the hosts."""

    def __init__(self, window_seconds: float, min_hosts: int) -> None:
        self.window_seconds = window_seconds
        self.min_hosts = min_hosts
        self._open: dict[str, float] | None = None  # signature -> last_ts of its open episode

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        if self._open is None:
            self._open = self._load_open(con, now)
        kinds = ", ".join(f"'{k.value}'" for k in FLEET_KINDS)
        rows = con.execute(
            f"SELECT epoch(ts), host, kind, code, count FROM events WHERE kind IN ({kinds}) "
            "AND ts >= make_timestamp(CAST(round((? - ?) * 1000000) AS BIGINT))",
            [now, self.window_seconds],
        ).fetchall()
        events = [FleetEvent(float(t), str(h), str(k), c, int(n)) for t, h, k, c, n in rows]
        findings = []
        for fault in correlate(events, self.min_hosts):
            last = self._open.get(fault.signature)
            self._open[fault.signature] = fault.last_ts
            if last is not None and fault.first_ts <= last + self.window_seconds:
                continue  # the same episode, already reported
            findings.append(fleet_fault_finding(fault, now))
        for signature, last in list(self._open.items()):
            if now - last > 2 * self.window_seconds:
                del self._open[signature]
        if findings:
            insert_records(con, findings)

    def _load_open(self, con: duckdb.DuckDBPyConnection, now: float) -> dict[str, float]:
        rows = con.execute(
            "SELECT evidence_json FROM findings WHERE kind = 'fleet_fault' "
            "AND ts >= make_timestamp(CAST(round((? - ?) * 1000000) AS BIGINT))",
            [now, 2 * self.window_seconds],
        ).fetchall()
        out: dict[str, float] = {}
        for (text,) in rows:
            fault = fleet_fault_evidence(text)
            if fault.signature is not None and fault.last_ts is not None:  # else: unreadable, not matched
                out[fault.signature] = fault.last_ts
        return out


def fleet_fault_finding(fault: FleetFault, now: float) -> Finding:
    """The `fleet_fault` finding for one episode of a fault seen on several hosts."""
    what = f"XID {fault.code}" if fault.kind == EventKind.XID else f"{fault.kind} {fault.code or ''}".strip()
    return Finding(
        ts=now,
        finding_id=finding_id(FindingKind.FLEET_FAULT, fault.signature, fault.first_ts),
        kind=FindingKind.FLEET_FAULT,
        severity=Severity.CRITICAL,
        subject=f"fleet/{fault.signature}",
        summary=(
            f"{what} on {len(fault.hosts)} hosts within {fault.last_ts - fault.first_ts:.0f} s "
            "(a shared cause: driver, firmware or fabric)"
        ),
        evidence_json=evidence_json(
            FleetFaultEvidence(
                signature=fault.signature,
                kind=fault.kind,
                code=fault.code,
                hosts=fault.hosts[:MAX_HOSTS_IN_EVIDENCE],
                host_count=len(fault.hosts),
                first_ts=fault.first_ts,
                last_ts=fault.last_ts,
                occurrences=fault.occurrences,
            )
        ),
    )
