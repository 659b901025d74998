"""The self-check as a controller command (`CommandKind.SELFCHECK`): the agent runs the same check as
`fleetguard selfcheck`, answers with its verdict in the ack (done: passed; failed: the first failure) and
ships the evidence as findings: a `selfcheck_passed` finding naming the command when it passed, a
`selfcheck_failed` one per failed check (fleetguard.selfcheck.report) when it did not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fleetguard.config import Config
from fleetguard.records.evidence import evidence_json, with_more_evidence
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.selfcheck.report import SelfcheckReport
from fleetguard.selfcheck.run import selfcheck_host
from fleetguard.settings.policy_files import load_policy
from fleetguard.shipping.commands import CommandOutcome, HostCommand

SelfcheckRun = Callable[[], SelfcheckReport]


def command_result(report: SelfcheckReport, command: HostCommand) -> tuple[CommandOutcome, str, list[object]]:
    """A report as the command's ack and the findings shipped with it."""
    took = report.finished - report.started
    summary = {
        "command_id": command.command_id,
        "reason": command.reason,
        "status": report.status.name.lower(),
        "seconds": round(took, 3),
        "checks": [f"{r.state.value} {r.check} {r.component}" for r in report.results][:64],
    }
    if report.passed:
        done = Finding(
            ts=report.finished,
            finding_id=finding_id(FindingKind.SELFCHECK_PASSED, report.host, command.command_id),
            kind=FindingKind.SELFCHECK_PASSED,
            severity=Severity.INFO,
            subject=f"host/{report.host}",
            summary=f"self-check passed on {report.host} ({len(report.results)} checks in {took:.1f} s)",
            host=report.host,
            evidence_json=evidence_json(summary),
        )
        return CommandOutcome.DONE, f"passed: {len(report.results)} checks in {took:.1f} s", [done]
    findings: list[object] = []
    for finding in report.findings():
        more = with_more_evidence(finding.evidence_json, {"command_id": command.command_id})
        findings.append(replace(finding, evidence_json=more))
    return CommandOutcome.FAILED, report.first_failure() or f"status {report.status.name.lower()}", findings


def selfcheck_runner(
    config: Config, run: SelfcheckRun | None = None
) -> Callable[[HostCommand], tuple[CommandOutcome, str, list[object]]]:
    """The agent's runner of SELFCHECK commands; `run` replaces the check itself in a test."""

    def check() -> SelfcheckReport:
        policy = load_policy(config.diagnosis.policy_file or None, config.policy.tables)
        return selfcheck_host(config, policy)

    def run_command(command: HostCommand) -> tuple[CommandOutcome, str, list[object]]:
        return command_result((run or check)(), command)

    return run_command
