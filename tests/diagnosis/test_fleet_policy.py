"""The fleet controller's restart decision across hosts, as a pure function over typed records."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from diagnosis.fleet_policy import (
    AGENT_ACTS,
    FleetDecision,
    FleetMembership,
    FleetVerdict,
    decide_fleet_restart,
    with_decision,
)
from fleetguard.records.findings import Finding, FindingKind, Severity

JOB = "job-1"
TWO_HOSTS = FleetMembership(reporting_hosts=2, hosts=frozenset({"h1", "h2"}), corroborated=True)
CONTESTED = FleetMembership(
    reporting_hosts=2,
    hosts=frozenset({"h1"}),
    corroborated=False,
    why_not="ranks 3 are claimed by more than one host: membership is not corroborated",
)
SOLE = FleetMembership(
    reporting_hosts=2,
    hosts=frozenset({"h1"}),
    corroborated=False,
    why_not="the job runs on h1 alone: its agent acts on it",
)
ONE_REPORTS = FleetMembership(reporting_hosts=1, hosts=frozenset({"h1"}), corroborated=False)


def finding(
    kind: FindingKind = FindingKind.HANG_LOCALISED, host: str | None = "h2", job_id: str | None = JOB
) -> Finding:
    return Finding(
        ts=1000.0,
        finding_id=f"fleet:{kind}-1",
        kind=kind,
        severity=Severity.CRITICAL,
        subject=f"job/{job_id}",
        summary="rank 3 stuck in all_reduce",
        host=host,
        job_id=job_id,
        rank=3,
        evidence_json=json.dumps({"hang_kind": "gpu_stream"}),
    )


RESTART_H2 = FleetDecision(
    FleetVerdict.RESTART, JOB, "h2", "rank 3 stuck in all_reduce (fleet analysis)", ("h1", "h2")
)


@pytest.mark.parametrize(
    ("case", "f", "membership", "acts", "expected"),
    [
        ("hang across two corroborated hosts", finding(), TWO_HOSTS, True, RESTART_H2),
        ("the controller sends no commands", finding(), TWO_HOSTS, False, AGENT_ACTS),
        ("a straggler is the agent's", finding(FindingKind.STRAGGLER), TWO_HOSTS, True, AGENT_ACTS),
        ("a dead rank is the agent's", finding(FindingKind.DEAD_RANK), TWO_HOSTS, True, AGENT_ACTS),
        ("the job is no longer watched", finding(), None, True, AGENT_ACTS),
        ("only one host reports the job", finding(), ONE_REPORTS, True, AGENT_ACTS),
        ("no culprit host known", finding(host=None), TWO_HOSTS, True, AGENT_ACTS),
        ("no job id", finding(job_id=None), TWO_HOSTS, True, AGENT_ACTS),
        (
            "contested ranks withhold",
            finding(host="h1"),
            CONTESTED,
            True,
            FleetDecision(FleetVerdict.WITHHELD, JOB, "h1", CONTESTED.why_not, ("h1",)),
        ),
        (
            "one host runs the whole job: withheld, whoever else reports",
            finding(),
            SOLE,
            True,
            FleetDecision(FleetVerdict.WITHHELD, JOB, "h2", SOLE.why_not, ("h1",)),
        ),
        (
            "culprit's host owns no rank: withheld",
            finding(host="h9"),
            TWO_HOSTS,
            True,
            FleetDecision(FleetVerdict.WITHHELD, JOB, "h9", "", ("h1", "h2")),
        ),
    ],
)
def test_decide_fleet_restart(
    case: str, f: Finding, membership: FleetMembership | None, acts: bool, expected: FleetDecision
) -> None:
    assert decide_fleet_restart(f, membership, controller_acts=acts) == expected, case


def test_restart_is_written_into_the_evidence() -> None:
    out = with_decision(finding(), RESTART_H2)
    evidence = json.loads(out.evidence_json)
    assert evidence == {
        "hang_kind": "gpu_stream",
        "restart_requested_of": "h2",
        "membership_hosts": ["h1", "h2"],
    }
    assert replace(out, evidence_json=finding().evidence_json) == finding()


def test_withheld_restart_says_why() -> None:
    decision = decide_fleet_restart(finding(host="h1"), CONTESTED, controller_acts=True)
    evidence = json.loads(with_decision(finding(host="h1"), decision).evidence_json)
    assert evidence["restart_withheld"] == CONTESTED.why_not
    assert "restart_requested_of" not in evidence
    assert evidence["membership_hosts"] == ["h1"]


def test_agent_acts_leaves_the_finding_as_it_was() -> None:
    f = finding(FindingKind.STRAGGLER)
    assert with_decision(f, decide_fleet_restart(f, TWO_HOSTS, controller_acts=True)) is f
