"""`fleetguard scan`: one look at this host through the policy, for Slurm prolog/epilog and node health
checks (exit 0 healthy, 1 warning, 2 critical, 3 unknown, as Nagios-style checks do).

A source the host must have (NVML unless switched off — the operator saying this host has no GPUs to check —
and the kernel log unless switched off) that cannot be read makes the answer UNKNOWN, not HEALTHY: a node
health check that passes a node whose driver is gone would put jobs on GPUs nobody can see. A definite
critical fault still says CRITICAL. InfiniBand ports and NCCL logs are optional: many hosts have neither.

Everything the kernel log holds since boot counts; port counters are read once, so a "fatal on any
increase" counter that is not zero is reported as a warning (it rose some time since the counters were last
reset); rate rules need two readings (`--interval`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from diagnosis.engine import IncidentEngine
from diagnosis.incident import Incident
from diagnosis.model import ComponentKind, IncidentKey, Observation, Severity
from diagnosis.policy import Policy
from diagnosis.rules import Signals
from diagnosis.rules_nic import port_id
from fleetguard.config import Config
from fleetguard.records.telemetry import Batch, NicCounterSample


class ScanStatus(IntEnum):
    HEALTHY = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass
class ScanReport:
    host: str
    status: ScanStatus
    checked: list[str]
    unavailable: list[str]
    incidents: list[Incident] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # required sources that could not be read

    def as_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status.name.lower(),
            "exit_code": int(self.status),
            "checked": self.checked,
            "unavailable": self.unavailable,
            "missing_required": self.missing,
            "counts": self.counts,
            "findings": [
                {
                    "severity": i.severity.value,
                    "component": i.key.component,
                    "fault": i.key.fault,
                    "action": i.action.value,
                    "occurrences": i.occurrences,
                    "first_seen": i.first_seen,
                    "last_seen": i.last_seen,
                    "rule": i.rule,
                    "summary": i.summary,
                }
                for i in self.incidents
            ],
        }


def scan(
    config: Config, policy: Policy, *, kmsg_file: str | None, interval_seconds: float = 0.0
) -> ScanReport:
    from fleetguard.agent.sources import NoSources, build_sources

    try:
        sources = build_sources(config, kmsg_file=kmsg_file)
    except NoSources as exc:
        return ScanReport(config.host, ScanStatus.UNKNOWN, [], [str(exc)])
    required = required_sources(config, kmsg_file)
    batch, checked, failed = collect_round(sources.collectors, time.time())
    if interval_seconds > 0 and checked:
        time.sleep(interval_seconds)
        second, _, _ = collect_round(sources.collectors, time.time())
        batch.gpu_samples.extend(second.gpu_samples)
        batch.nic_counters = second.nic_counters  # with deltas and rates against the first reading
        batch.events.extend(second.events)
    for collector in sources.collectors:
        collector.close()
    missing = [name for name, names in required.items() if not names & set(checked)]
    return evaluate(config.host, policy, batch, checked, [*sources.unavailable, *failed], missing)


def required_sources(config: Config, kmsg_file: str | None) -> dict[str, set[str]]:
    """Each source this host must be read from, with the collector names that count as reading it."""
    required: dict[str, set[str]] = {}
    if config.collectors.nvml:
        required["nvml"] = {"nvml"}
    if kmsg_file is not None or config.collectors.kmsg:
        required["kernel log"] = {"kmsg", "kmsg_file"}
    return required


def collect_round(collectors: list[Any], now: float) -> tuple[Batch, list[str], list[str]]:
    batch, checked, failed = Batch(), [], []
    for collector in collectors:
        try:
            batch.extend(collector.collect(now))
        except Exception as exc:  # one broken source must not hide the others
            failed.append(f"{collector.name}: {type(exc).__name__}: {exc}")
            continue
        checked.append(collector.name)
    return batch, checked, failed


def evaluate(
    host: str,
    policy: Policy,
    batch: Batch,
    checked: list[str],
    unavailable: list[str],
    missing: list[str] | None = None,
) -> ScanReport:
    """The policy over one collection; the pure part of `scan`. `missing` names required sources that could
    not be read: the answer is then UNKNOWN unless a critical fault was found anyway."""
    missing = missing or []
    if not checked:
        return ScanReport(host, ScanStatus.UNKNOWN, checked, unavailable, missing=missing)
    # Everything since boot counts: no time passes during a scan, so nothing resolves by being old.
    now = time.time()
    engine = IncidentEngine(policy)
    signals = Signals(gpu_samples=batch.gpu_samples, nic_samples=batch.nic_samples, events=batch.events)
    engine.observe(signals, now, tick=False)
    rate_counters = [c for c in batch.nic_counters if c.delta is not None]
    engine.observe(Signals(nic_counters=rate_counters), now, tick=False)
    engine.observe_many(_since_reset(batch.nic_counters, policy), now, tick=False)
    incidents = sorted(engine.active(), key=lambda i: (-i.severity.rank, i.key.text()))
    worst = max((i.severity.rank for i in incidents), default=-1)
    status = status_of(worst, missing)
    counts = {
        "gpus": len({s.uuid for s in batch.gpu_samples}),
        "ports": len({(n.device, n.port) for n in batch.nic_samples}),
        "kernel_events": len(batch.events),
    }
    return ScanReport(host, status, checked, unavailable, incidents, counts, missing)


def status_of(worst_rank: int, missing: list[str]) -> ScanStatus:
    """Critical beats unknown (a fault was seen); unknown beats warning and healthy (the host could not be
    vouched for)."""
    if worst_rank >= 2:
        return ScanStatus.CRITICAL
    if missing:
        return ScanStatus.UNKNOWN
    return ScanStatus.WARNING if worst_rank == 1 else ScanStatus.HEALTHY


def _since_reset(counters: list[NicCounterSample], policy: Policy) -> list[Observation]:
    out = []
    for c in counters:
        rule = policy.counters.get(c.counter)
        if rule is None or not rule.fatal_on_increase or c.delta is not None or c.value <= 0:
            continue
        out.append(
            Observation(
                ts=c.ts,
                key=IncidentKey(c.host, ComponentKind.PORT, port_id(c.device, c.port), f"nic:{c.counter}"),
                severity=Severity.WARNING,
                action=rule.action,
                rule=f"counters.{c.counter}",
                message=f"{c.counter} = {c.value} since the counters were last reset",
            )
        )
    return out


def render(report: ScanReport) -> str:
    lines = [f"{report.host}: {report.status.name} (checked: {', '.join(report.checked) or 'nothing'})"]
    for name in report.missing:
        lines.append(f"  UNKNOWN      {name}: required but could not be read (see below)")
    for note in report.unavailable:
        lines.append(f"  unavailable  {note}")
    for i in report.incidents:
        lines.append(
            f"  {i.severity.value:8s} {i.key.component:28s} {i.key.fault:24s} x{i.occurrences:<6d} "
            f"-> {i.action.value}: {i.summary[:100]}"
        )
    if not report.incidents and report.status is ScanStatus.HEALTHY:
        lines.append("  no faults found")
    if report.missing and "nvml" in report.missing:
        lines.append("  a host without NVIDIA GPUs: run with --no-nvml to check only the rest")
    return "\n".join(lines)
