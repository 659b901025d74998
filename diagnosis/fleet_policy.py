"""What the fleet controller does about a runtime finding across hosts: restart the culprit's host, withhold
the restart, or leave the finding to the host's own agent. The multi-host counterpart of
`diagnosis.runtime_policy` (one host's decisions), pure over typed records; the controller only does the I/O
(queues the command, counts, logs).

- Only a `hang_localised` finding is the controller's: a hang across hosts is seen whole only there (the
  other hosts' agents see only ranks waiting in a collective). Every other finding, and a job only one host
  reports, is its host's agent's to act on.
- One host's records may decide an action on another host only when the job's membership is corroborated
  (straggler.membership: several hosts, disjoint ranks, one world size) and the culprit's host owns ranks of
  it; otherwise the restart is withheld and the finding says why.
- There is no cost weighing here: a hang costs the whole job until it is restarted, so the restart-cost
  comparison (`ActionPolicyConfig.restart_cost_seconds`, for stragglers) never applies; the culprit host's
  agent keeps its own cooldown and crash-loop guard when it runs the command.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from fleetguard.records.evidence import with_more_evidence
from fleetguard.records.findings import Finding, FindingKind

FLEET_RESTART_KIND = FindingKind.HANG_LOCALISED


class FleetVerdict(StrEnum):
    AGENT_ACTS = "agent_acts"  # not the controller's to decide: the finding is passed on unchanged
    RESTART = "restart"  # ask the culprit's host to restart its part of the job
    WITHHELD = "withheld"  # the controller would restart, but the membership does not let it act


@dataclass(frozen=True, slots=True)
class FleetMembership:
    """What the controller knows of who runs a job (built from straggler.membership by the controller)."""

    reporting_hosts: int  # hosts that reported anything of the job (their claims), owners or not
    hosts: frozenset[str]  # the hosts whose records count (they own ranks)
    corroborated: bool  # several hosts, disjoint ranks, one world size
    why_not: str = ""  # one line for an operator when not corroborated


@dataclass(frozen=True, slots=True)
class FleetDecision:
    verdict: FleetVerdict
    job_id: str | None = None
    host: str | None = None  # the culprit's host: the one asked to restart (or that would have been)
    reason: str = ""  # RESTART: the command's reason; WITHHELD: why not
    membership_hosts: tuple[str, ...] = ()  # sorted, for the finding's evidence


AGENT_ACTS = FleetDecision(FleetVerdict.AGENT_ACTS)


def decide_fleet_restart(
    finding: Finding, membership: FleetMembership | None, *, controller_acts: bool
) -> FleetDecision:
    """The controller's decision on one fleet finding whose `host` is already the culprit rank's owner.
    `membership`: the job's, or None when the job is no longer watched; `controller_acts`: the controller
    sends commands to hosts at all."""
    host, job_id = finding.host, finding.job_id
    if (
        finding.kind != FLEET_RESTART_KIND
        or membership is None
        or host is None
        or job_id is None
        or not controller_acts
        or membership.reporting_hosts < 2
    ):
        return AGENT_ACTS  # a job only one host reports: that host's agent acts on it
    hosts = tuple(sorted(membership.hosts))
    if membership.corroborated and host in membership.hosts:
        return FleetDecision(FleetVerdict.RESTART, job_id, host, f"{finding.summary} (fleet analysis)", hosts)
    return FleetDecision(FleetVerdict.WITHHELD, job_id, host, membership.why_not, hosts)


def with_decision(finding: Finding, decision: FleetDecision) -> Finding:
    """The finding with the decision in its evidence (what was asked of whom, or why nothing was)."""
    if decision.verdict is FleetVerdict.AGENT_ACTS:
        return finding
    more: dict[str, object] = {"membership_hosts": list(decision.membership_hosts)}
    if decision.verdict is FleetVerdict.RESTART:
        more["restart_requested_of"] = decision.host
    else:
        more["restart_withheld"] = decision.reason
    return replace(finding, evidence_json=with_more_evidence(finding.evidence_json, more))
