"""The self-check as a controller command, on the agent: the verdict in the ack, the evidence as findings
naming the command, shipped before the ack; other kinds still go to the training runtime."""

from __future__ import annotations

import json

from fleetguard.config import load_config
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot
from fleetguard.selfcheck.command import command_result, selfcheck_runner
from fleetguard.selfcheck.report import CheckResult, CheckState, SelfcheckReport
from fleetguard.shipping.agent_side import host_runner, runtime_runner
from fleetguard.shipping.commands import CommandKind, CommandOutcome, HostCommand

T0 = 1_700_000_000.0
COMMAND = HostCommand("c0ffee", CommandKind.SELFCHECK, None, "fleetguard inc-1: self-check before resume")


def _report(*states: CheckState) -> SelfcheckReport:
    results = [
        CheckResult("allreduce", "host", CheckState.PASSED, "busbw 0.8 GB/s (gloo)", {"busbw_gbps": 0.8}),
        *(CheckResult("nic", f"port:mlx5_{i}/1", s, "state DOWN") for i, s in enumerate(states)),
    ]
    return SelfcheckReport("node1", results, T0, T0 + 4.2)


def test_a_passed_check_is_done_with_one_finding_naming_the_command() -> None:
    outcome, detail, records = command_result(_report(), COMMAND)
    assert (outcome, detail) == (CommandOutcome.DONE, "passed: 1 checks in 4.2 s")
    [finding] = records
    assert finding.kind == "selfcheck_passed" and finding.host == "node1"  # type: ignore[attr-defined]
    evidence = json.loads(finding.evidence_json)  # type: ignore[attr-defined]
    assert evidence["command_id"] == "c0ffee" and evidence["checks"] == ["passed allreduce host"]


def test_a_failed_check_fails_with_the_first_failure_and_a_finding_per_failed_check() -> None:
    outcome, detail, records = command_result(_report(CheckState.FAILED, CheckState.FAILED), COMMAND)
    assert (outcome, detail) == (CommandOutcome.FAILED, "nic port:mlx5_0/1: state DOWN")
    assert [r.kind for r in records] == ["selfcheck_failed", "selfcheck_failed"]  # type: ignore[attr-defined]
    assert all(json.loads(r.evidence_json)["command_id"] == "c0ffee" for r in records)  # type: ignore[attr-defined]


def test_the_agent_routes_selfcheck_to_its_own_runner_and_ships_the_evidence_first() -> None:
    shipped: list[object] = []
    config = load_config(env={}, overrides={"agent.host": "node1"})
    run = host_runner(
        runtime_runner(RuntimeSlot(), "node1"),
        {CommandKind.SELFCHECK: selfcheck_runner(config, run=lambda: _report(CheckState.FAILED))},
        shipped.extend,
    )
    assert run(COMMAND) == (CommandOutcome.FAILED, "nic port:mlx5_0/1: state DOWN")
    assert len(shipped) == 1
    # Without the training runtime the runtime's kinds are refused, as before.
    cordon = HostCommand("c1", CommandKind.CORDON, None, "operator")
    assert run(cordon)[0] is CommandOutcome.REFUSED


def test_an_agent_without_a_selfcheck_runner_refuses_it_clearly() -> None:
    outcome, detail = runtime_runner(RuntimeSlot(), "node1")(COMMAND)
    assert outcome is CommandOutcome.REFUSED and detail == "selfcheck is not run by this agent"
