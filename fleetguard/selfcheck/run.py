"""One self-check of this host: health fields, then compute and memory per GPU, the all-reduce, and the NIC
ports read before and after them, all inside one deadline."""

from __future__ import annotations

import time
from dataclasses import replace

from diagnosis.policy import Policy
from fleetguard.agent.sources import NoSources, Sources, build_sources
from fleetguard.config import Config
from fleetguard.incidents.scan import required_sources
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


def selfcheck_host(
    config: Config,
    policy: Policy,
    *,
    gpus: str = "all",
    kmsg_file: str | None = None,
    timeout_seconds: float | None = None,
) -> SelfcheckReport:
    """The self-check of the host `config` describes, on collectors of its own (never the ones a running
    agent samples with). `gpus`: "all", "none" (no GPUs to check here) or "0,1,..."."""
    started = now()
    if gpus == "none":
        config = replace(config, collectors=replace(config.collectors, nvml=False))
    # Never move a running agent's kernel-log position: read from the start, remember nothing.
    config = replace(config, collectors=replace(config.collectors, kmsg_state_path=""))
    try:
        sources = build_sources(config, kmsg_file=kmsg_file)
    except NoSources as exc:
        return SelfcheckReport(
            config.host, [CheckResult("health", "host", CheckState.UNKNOWN, str(exc))], started, now()
        )
    try:
        opened = {c.name for c in sources.collectors}
        required = {} if sources.simulated else required_sources(config, kmsg_file)
        missing = [name for name, names in required.items() if not names & opened]
        if gpus == "all":
            indices = list(range(sources.gpus if sources.simulated else _nvml_gpus(sources)))
        elif gpus == "none":
            indices = []
        else:
            indices = [int(part) for part in gpus.split(",")]
        deadline = timeout_seconds if timeout_seconds is not None else policy.selfcheck.timeout_seconds
        return run_selfcheck(
            config.host, sources, policy, gpus=indices, missing=missing, timeout_seconds=deadline
        )
    finally:
        for collector in sources.collectors:
            collector.close()


def _nvml_gpus(sources: Sources) -> int:
    nvml = next((c for c in sources.collectors if c.name == "nvml"), None)
    return len(getattr(nvml, "gpu_indices", []) or [])
