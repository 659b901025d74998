"""IB / RoCE ports as observations: counter increases and rates, and the port's state."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from diagnosis.model import ComponentKind, Deferred, IncidentKey, Observation, RepairAction, Severity
from diagnosis.policy import CounterRule
from fleetguard.records.telemetry import NicCounterSample, NicSample


def port_id(device: str, port: int) -> str:
    return f"{device}/{port}"


def counter_observation(sample: NicCounterSample, rules: Mapping[str, CounterRule]) -> Observation | None:
    rule = rules.get(sample.counter)
    if rule is None or sample.reset or sample.delta is None or sample.delta <= 0:
        return None
    severity: Severity | None = None
    rate = sample.rate_per_second
    if rule.fatal_on_increase or (
        rate is not None
        and rule.critical_rate_per_second is not None
        and rate >= rule.critical_rate_per_second
    ):
        severity = Severity.CRITICAL
    elif rate is not None and rule.warn_rate_per_second is not None and rate >= rule.warn_rate_per_second:
        severity = Severity.WARNING
    if severity is None:
        return None
    what = f"+{sample.delta}" + (f" ({rate:.2f}/s)" if rate is not None else "")
    return Observation(
        ts=sample.ts,
        key=IncidentKey(
            sample.host, ComponentKind.PORT, port_id(sample.device, sample.port), f"nic:{sample.counter}"
        ),
        severity=severity,
        action=rule.action,
        rule=f"counters.{sample.counter}",
        message=f"{sample.counter} {what}",
        count=1,
    )


def port_down(state: str | None) -> bool:
    """Whether `port_observations` calls a port in this state down (None: says nothing of it)."""
    return state is not None and state.upper() != "ACTIVE"


def port_observations(sample: NicSample, defer_healthy: bool = False) -> Iterator[Observation | Deferred]:
    """A port that is not ACTIVE is down; ACTIVE again clears it (a cancellation pair in the policy). With
    `defer_healthy`, ACTIVE comes as its `Deferred` mark."""
    if sample.state is None:
        return
    key_id = port_id(sample.device, sample.port)
    active = sample.state.upper() == "ACTIVE"
    fault = "nic:port_active" if active else "nic:port_down"
    if active and defer_healthy:
        key = IncidentKey(sample.host, ComponentKind.PORT, key_id, fault)
        yield Deferred(
            sample.ts,
            key,
            "nic.port_state",
            f"port {key_id} {sample.state} {sample.phys_state or ''}".strip(),
        )
        return
    yield Observation(
        ts=sample.ts,
        key=IncidentKey(sample.host, ComponentKind.PORT, key_id, fault),
        severity=Severity.INFO if active else Severity.CRITICAL,
        action=RepairAction.NONE if active else RepairAction.INSPECT,
        rule="nic.port_state",
        message=f"port {key_id} {sample.state} {sample.phys_state or ''}".strip(),
        healthy=active,
    )
