"""The self-check as a controller command (`CommandKind.SELFCHECK`): the agent runs the same check as
`fleetguard selfcheck`, answers with its verdict in the ack (done: passed; failed: the first failure) and
ships the evidence as findings: a `selfcheck_passed` finding naming the command when it passed, a
`selfcheck_failed` one per failed check (fleetguard.selfcheck.report) when it did not."""

from __future__ import annotations

from collections.abc import Callable

from fleetguard.config import Config
from fleetguard.records.evidence import SelfcheckPassedEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.selfcheck.report import SelfcheckReport
from fleetguard.selfcheck.run import selfcheck_host
from fleetguard.settings.policy_files import load_policy
from fleetguard.shipping.commands import CommandOutcome, HostCommand

SelfcheckRun = Callable[[], SelfcheckReport]


def command_result(report: SelfcheckReport, command: HostCommand) -> tuple[CommandOutcome, str, list[object]]:
    """A report as the command's ack and the findings shipped with it."""
    if report.passed:
        took = report.finished - report.started
        done = passed_finding(report, command)
        return CommandOutcome.DONE, f"passed: {len(report.results)} checks in {took:.1f} s", [done]
    findings: list[object] = list(report.findings(command.command_id))
    return CommandOutcome.FAILED, report.first_failure() or f"status {report.status.name.lower()}", findings


def passed_finding(report: SelfcheckReport, command: HostCommand) -> Finding:
    """The `selfcheck_passed` factory: one per host and command."""
    took = report.finished - report.started
    evidence = SelfcheckPassedEvidence(
        command_id=command.command_id,
        reason=command.reason,
        status=report.status.name.lower(),
        seconds=round(took, 3),
        checks=tuple(f"{r.state.value} {r.check} {r.component}" for r in report.results)[:64],
    )
    return Finding(
        ts=report.finished,
        finding_id=finding_id(FindingKind.SELFCHECK_PASSED, report.host, command.command_id),
        kind=FindingKind.SELFCHECK_PASSED,
        severity=Severity.INFO,
        subject=f"host/{report.host}",
        summary=f"self-check passed on {report.host} ({len(report.results)} checks in {took:.1f} s)",
        host=report.host,
        evidence_json=evidence_json(evidence),
    )


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
