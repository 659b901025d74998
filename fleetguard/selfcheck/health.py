"""The health fields a host must be clean of: the diagnosis policy over one reading of every GPU (ECC,
remapped rows, retired pages, throttling, NVLink/PCIe errors) and the kernel log since boot (XIDs) — the
same evaluation as `fleetguard scan`, so a host returns only when scan would call it healthy too."""

from __future__ import annotations

from diagnosis.model import Severity
from diagnosis.policy import Policy
from fleetguard.agent.sources import Sources
from fleetguard.incidents.scan import collect_round, evaluate
from fleetguard.selfcheck.report import CheckResult, CheckState, now


def health_checks(host: str, sources: Sources, policy: Policy, missing: list[str]) -> list[CheckResult]:
    """One result per fault found (failed when critical, warning otherwise), or one that says all is clean.

    `missing`: required sources (the NVIDIA driver, the kernel log) that could not be opened."""
    batch, checked, failed = collect_round(sources.collectors, now())
    report = evaluate(host, policy, batch, checked, [*sources.unavailable, *failed], missing)
    results = [
        CheckResult(
            "health",
            i.key.component,
            CheckState.FAILED if i.severity is Severity.CRITICAL else CheckState.WARNING,
            f"{i.key.fault}: {i.summary}"[:300],
            {"fault": i.key.fault, "severity": i.severity.value, "occurrences": i.occurrences},
        )
        for i in report.incidents
    ]
    results.extend(
        CheckResult("health", source, CheckState.UNKNOWN, "required but could not be read")
        for source in report.missing
    )
    if not results:
        gpus = report.counts.get("gpus", 0)
        results.append(
            CheckResult(
                "health",
                "host",
                CheckState.PASSED,
                f"no faults: {gpus} GPUs' health fields, {', '.join(checked) or 'nothing'} read",
                {"gpus": gpus, "kernel_events": report.counts.get("kernel_events", 0)},
            )
        )
    return results
