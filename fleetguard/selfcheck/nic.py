"""NIC ports for the self-check: every port ACTIVE, and no error counter (a counter the policy has a rule
for: symbol errors, link downs, receive errors ...) rising between the reading before the tests and the one
after them — a port that only errs under load shows here."""

from __future__ import annotations

from collections.abc import Sequence

from collectors.protocol import Collector
from diagnosis.policy import Policy
from fleetguard.records.telemetry import Batch
from fleetguard.selfcheck.report import CheckResult, CheckState, now

NIC_COLLECTORS = frozenset({"rdma", "simulated_nic"})


def nic_collectors(collectors: Sequence[Collector]) -> list[Collector]:
    return [c for c in collectors if c.name in NIC_COLLECTORS]


def read_ports(collectors: Sequence[Collector]) -> Batch:
    batch = Batch()
    for collector in collectors:
        batch.extend(collector.collect(now()))
    return batch


def nic_checks(before: Batch, after: Batch, policy: Policy) -> list[CheckResult]:
    if not after.nic_samples:
        return []
    results = []
    start = {(c.device, c.port, c.counter): c.value for c in before.nic_counters}
    rose: dict[tuple[str, int], list[str]] = {}
    for c in after.nic_counters:
        if c.counter not in policy.counters:
            continue
        increase = c.value - start.get((c.device, c.port, c.counter), c.value)
        if increase > policy.selfcheck.nic_error_increase_max:
            rose.setdefault((c.device, c.port), []).append(f"{c.counter} +{increase}")
    for s in sorted(after.nic_samples, key=lambda s: (s.device, s.port)):
        component = f"port:{s.device}/{s.port}"
        if (s.state or "").upper() != "ACTIVE":
            detail = f"port is {s.state or 'unknown'} ({s.phys_state or 'no physical state'})"
            results.append(CheckResult("nic", component, CheckState.FAILED, detail, {"state": s.state or ""}))
        elif (s.device, s.port) in rose:
            errors = ", ".join(rose[(s.device, s.port)])
            detail = f"error counters rose during the test: {errors}"
            results.append(CheckResult("nic", component, CheckState.FAILED, detail, {"errors": errors}))
        else:
            rate = f", {s.rate_gbps:g} Gb/s" if s.rate_gbps else ""
            results.append(CheckResult("nic", component, CheckState.PASSED, f"ACTIVE{rate}, errors steady"))
    return results
