"""A self-check's results: one line per check, an overall status with `scan`'s exit codes, findings."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from fleetguard.incidents.scan import ScanStatus
from fleetguard.records.evidence import SelfcheckFailedEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id


class CheckState(StrEnum):
    PASSED = "passed"
    WARNING = "warning"  # passed, with something to look at (a throttled GPU)
    FAILED = "failed"
    SKIPPED = "skipped"  # does not apply here (no GPU, PyTorch not installed): says why
    UNKNOWN = "unknown"  # should have run and could not (no driver, timed out before an answer)


@dataclass(frozen=True)
class CheckResult:
    check: str  # "health", "compute", "memory", "allreduce", "nic"
    component: str  # "gpu:0", "port:mlx5_0/1", "host"
    state: CheckState
    detail: str
    evidence: Mapping[str, float | int | str] = field(default_factory=dict)


@dataclass
class SelfcheckReport:
    host: str
    results: list[CheckResult]
    started: float
    finished: float

    @property
    def status(self) -> ScanStatus:
        states = {r.state for r in self.results}
        if CheckState.FAILED in states:
            return ScanStatus.CRITICAL
        if CheckState.UNKNOWN in states or not self.results:
            return ScanStatus.UNKNOWN
        return ScanStatus.WARNING if CheckState.WARNING in states else ScanStatus.HEALTHY

    @property
    def passed(self) -> bool:
        """Fit to take work: nothing failed and nothing that should have run is unknown."""
        return self.status in (ScanStatus.HEALTHY, ScanStatus.WARNING)

    def first_failure(self) -> str:
        """The first check that failed or could not run, as one line; "" when none."""
        bad = [r for r in self.results if r.state in (CheckState.FAILED, CheckState.UNKNOWN)]
        return f"{bad[0].check} {bad[0].component}: {bad[0].detail}" if bad else ""

    def as_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status.name.lower(),
            "exit_code": int(self.status),
            "passed": self.passed,
            "seconds": round(self.finished - self.started, 3),
            "checks": [
                {
                    "check": r.check,
                    "component": r.component,
                    "state": r.state.value,
                    "detail": r.detail,
                    "evidence": dict(r.evidence),
                }
                for r in self.results
            ],
        }

    def findings(self, command_id: str | None = None) -> list[Finding]:
        """One `selfcheck_failed` finding per failed check, its evidence as the finding's (with the controller
        command that asked for the self-check, where one did)."""
        out = []
        for r in self.results:
            if r.state is not CheckState.FAILED:
                continue
            out.append(
                Finding(
                    ts=self.finished,
                    # One id per host, check, component and run: a re-run is a new finding.
                    finding_id=finding_id(
                        FindingKind.SELFCHECK_FAILED, self.host, r.check, r.component, self.started
                    ),
                    kind=FindingKind.SELFCHECK_FAILED,
                    severity=Severity.CRITICAL,
                    subject=f"{self.host}/{r.component}",
                    summary=f"self-check {r.check} failed on {r.component}: {r.detail}"[:500],
                    host=self.host,
                    evidence_json=evidence_json(
                        SelfcheckFailedEvidence(
                            r.check, r.component, command_id, MappingProxyType(dict(r.evidence))
                        )
                    ),
                )
            )
        return out


def render(report: SelfcheckReport) -> str:
    took = report.finished - report.started
    lines = [f"{report.host}: {report.status.name} ({len(report.results)} checks in {took:.1f} s)"]
    for r in report.results:
        lines.append(f"  {r.state.value:8s} {r.check:10s} {r.component:18s} {r.detail}")
    return "\n".join(lines)


def now() -> float:
    return time.time()
