"""One self-check of this host: health fields, then compute and memory per GPU, the all-reduce, and the NIC
ports read before and after them, all inside one deadline."""

from __future__ import annotations

import time

from diagnosis.policy import Policy
from fleetguard.agent.sources import Sources
from fleetguard.selfcheck.allreduce import allreduce_check
from fleetguard.selfcheck.compute import compute_checks
from fleetguard.selfcheck.health import health_checks
from fleetguard.selfcheck.nic import nic_checks, nic_collectors, read_ports
from fleetguard.selfcheck.report import CheckResult, CheckState, SelfcheckReport, now
from fleetguard.selfcheck.torch_probe import TorchInfo, probe


def run_selfcheck(
    host: str,
    sources: Sources,
    policy: Policy,
    *,
    gpus: list[int],
    missing: list[str],
    timeout_seconds: float,
    torch: TorchInfo | None = None,
) -> SelfcheckReport:
    """`gpus`: the GPU indices to test (empty: none, the operator said this host has no GPUs to check)."""
    started = now()
    deadline = time.monotonic() + timeout_seconds

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    ports = nic_collectors(sources.collectors)
    before = read_ports(ports)
    results: list[CheckResult] = health_checks(host, sources, policy, missing)
    info = torch or probe(min(60.0, left()))
    results += compute_checks(gpus, info, policy.selfcheck, left())
    results.append(allreduce_check(gpus, info, policy.selfcheck, left()))
    results += nic_checks(before, read_ports(ports), policy)
    if time.monotonic() > deadline:
        results.append(CheckResult("deadline", "host", CheckState.FAILED, f"over {timeout_seconds:g} s"))
    return SelfcheckReport(host, results, started, now())
