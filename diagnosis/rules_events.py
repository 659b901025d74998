"""Events (XID, GPU lost, AER, link down, NCCL errors ...) and findings as observations, by the policy."""

from __future__ import annotations

from collections.abc import Mapping

from diagnosis.model import ComponentKind, IncidentKey, Observation, RepairAction, Severity
from diagnosis.policy import Policy
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Event, EventKind

# Events about a GPU (component = the GPU); the others are about the host or a NIC.
_GPU_EVENTS = frozenset({EventKind.XID, EventKind.GPU_FALLEN_OFF_BUS, EventKind.GPU_LOST, EventKind.PCIE_AER})
_NIC_EVENTS = frozenset(
    {EventKind.LINK_DOWN, EventKind.NIC_OVER_TEMPERATURE, EventKind.NIC_INSUFFICIENT_POWER}
)
_SEVERITY = {"info": Severity.INFO, "warning": Severity.WARNING, "critical": Severity.CRITICAL}


def gpu_component(event: Event, uuids: Mapping[tuple[str, str], str]) -> str:
    """The GPU's uuid when a sample told us its PCI address, else the address, else its index."""
    if event.pci_bus_id:
        return uuids.get((event.host, _short_pci(event.pci_bus_id)), event.pci_bus_id)
    if event.gpu_index is not None:
        return uuids.get((event.host, f"index:{event.gpu_index}"), f"index:{event.gpu_index}")
    return "unknown"


def _short_pci(pci: str) -> str:
    """'0000:9b:00.0' and '0000:9b:00' (the kernel log's form) name the same GPU."""
    return pci.lower().removesuffix(".0")


def event_observation(
    event: Event, policy: Policy, uuids: Mapping[tuple[str, str], str]
) -> Observation | None:
    if event.kind == EventKind.XID and event.code is not None:
        return _xid(event, policy, uuids)
    rule = policy.events.get(event.kind)
    if rule is None:
        return None
    if event.kind in _GPU_EVENTS:
        component, ident = ComponentKind.GPU, gpu_component(event, uuids)
    elif event.kind in _NIC_EVENTS and event.device:
        component, ident = ComponentKind.PORT, event.device
    else:
        component, ident = ComponentKind.HOST, event.host
    fault = f"event:{event.kind}" if event.kind != EventKind.LINK_DOWN else "nic:link_downed"
    if event.kind == EventKind.SXID and event.code is not None:
        fault = f"sxid:{event.code}"
    return Observation(
        ts=event.ts,
        key=IncidentKey(event.host, component, ident, fault),
        severity=rule.severity,
        action=rule.action,
        rule=f"events.{event.kind}",
        message=event.message[:500],
        count=max(1, event.count),
        min_count=rule.min_count,
        window_seconds=rule.count_window_seconds,
    )


def _xid(event: Event, policy: Policy, uuids: Mapping[tuple[str, str], str]) -> Observation:
    assert event.code is not None
    rule = policy.xid_rule(event.code)
    return Observation(
        ts=event.ts,
        key=IncidentKey(event.host, ComponentKind.GPU, gpu_component(event, uuids), f"xid:{event.code}"),
        severity=rule.severity,
        action=rule.action,
        rule=f"xid.{event.code}",
        message=event.message[:500],
        count=max(1, event.count),
        min_count=rule.min_count,
        window_seconds=rule.count_window_seconds,
        needs_company=rule.application,
        sticky_seconds=rule.sticky_seconds,
        storm_count=rule.storm_lines,
    )


# The host a finding without one is keyed to (readers that leave hosts out must leave this one out too).
FINDING_FLEET_HOST = "fleet"
# Host names no host may take: a host called "fleet" would share its incidents with the fleet-wide findings
# and the breaker, and a fleet-wide incident's action would land on it. Refused where a name enters: the
# agent's config, a token's issue, every ingested batch.
RESERVED_HOST_NAMES = frozenset({FINDING_FLEET_HOST})


def reserved_host_name(host: str) -> str | None:
    """Why `host` may not name a host, or None when it may."""
    if host in RESERVED_HOST_NAMES:
        return f"host name {host!r} is reserved for fleet-wide incidents; give this host another name"
    return None


def finding_observation(finding: Finding, policy: Policy) -> Observation | None:
    """A runtime finding about a job (or an at-risk prediction about a GPU) as an observation."""
    rule = policy.findings.get(finding.kind)
    if rule is None:
        return None
    if finding.gpu_uuid and not finding.job_id:
        component, ident = ComponentKind.GPU, finding.gpu_uuid
    elif finding.job_id:
        component, ident = ComponentKind.JOB, finding.job_id
    else:
        component, ident = ComponentKind.HOST, finding.host or FINDING_FLEET_HOST
    reported = _SEVERITY.get(finding.severity, rule.severity)
    return Observation(
        ts=finding.ts,
        key=IncidentKey(finding.host or FINDING_FLEET_HOST, component, ident, f"finding:{finding.kind}"),
        severity=reported if reported.rank > rule.severity.rank else rule.severity,
        action=rule.action if rule.action is not RepairAction.NONE else RepairAction.NONE,
        rule=f"findings.{finding.kind}",
        message=finding.summary[:500],
    )
