"""The diagnosis policy as typed data: what each signal means, when it becomes an incident, what to do.

Loaded from data/policy.toml (and the user's overrides) by `diagnosis.policy_load`; every rule here is plain
data so a policy can be replayed over history (`diagnosis.replay`) before it is rolled out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnosis.model import RepairAction, Severity


@dataclass(frozen=True, slots=True)
class XidRule:
    xid: int
    name: str
    severity: Severity
    action: RepairAction
    min_count: int = 1  # occurrences within count_window_seconds before an incident opens
    count_window_seconds: float = 86400.0
    sticky_seconds: float = 0.0  # still relevant this long after the last sighting
    # An application XID alone is a user bug: it matters only when it repeats (min_count) or comes with
    # another fault of the same GPU.
    application: bool = False
    # An application XID printed this many times within the window is a storm worth a look, repeats or not
    # (0: never); lines of one burst count here, unlike for min_count.
    storm_lines: int = 0


@dataclass(frozen=True, slots=True)
class CounterRule:
    """An IB/RoCE port counter: any increase is fatal, or its rate per second crosses a threshold."""

    counter: str
    fatal_on_increase: bool = False
    warn_rate_per_second: float | None = None
    critical_rate_per_second: float | None = None
    action: RepairAction = RepairAction.INSPECT


@dataclass(frozen=True, slots=True)
class EventRule:
    """Non-XID events (GPU lost, PCIe AER, NIC over temperature, NCCL errors ...), by event kind."""

    kind: str
    severity: Severity
    action: RepairAction
    min_count: int = 1
    count_window_seconds: float = 3600.0


@dataclass(frozen=True, slots=True)
class GpuRules:
    """Rules over NVML samples: ECC, row remapping, throttling, temperature, NVLink and PCIe errors."""

    remap_pending_action: RepairAction = RepairAction.RESET_GPU
    remap_failure_action: RepairAction = RepairAction.RESET_GPU
    uncorrected_ecc_action: RepairAction = RepairAction.RESET_GPU
    corrected_ecc_per_hour_warn: float = 1000.0
    thermal_throttle: bool = True
    power_throttle: bool = True
    temperature_warn_celsius: float = 90.0
    nvlink_crc_per_second_warn: float = 10.0
    pcie_replay_per_second_warn: float = 10.0


@dataclass(frozen=True, slots=True)
class FindingRule:
    """A runtime or predictor finding kind (dead_rank, hung_rank, straggler, at_risk_gpu ...)."""

    kind: str
    severity: Severity
    action: RepairAction


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A later healthy observation of `by` resolves an open `fault` of the same component at once."""

    fault: str
    by: str


@dataclass(frozen=True, slots=True)
class Escalation:
    """reset -> reboot -> inspect: each time the same fault comes back `returns` times within `window`."""

    ladder: tuple[RepairAction, ...] = (
        RepairAction.RESET_GPU,
        RepairAction.REBOOT_NODE,
        RepairAction.INSPECT,
    )
    returns: int = 2
    window_seconds: float = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Lifecycle:
    resolve_healthy_seconds: float = 600.0  # no sighting for this long (or the rule's sticky time): resolved
    close_after_seconds: float = 3600.0  # resolved this long without coming back: closed
    update_alert_every: int = 0  # also alert "updated" every N occurrences (0: only on escalation)
    # Damping: a fault cleared (cancelled by a healthy reading) is resolved only once it stayed clear this
    # long; coming back sooner is a flap of the same open incident (counted, no new page). 0: no damping.
    flap_window_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """Stop acting when too much of the fleet was acted on too fast; repairs at a bounded rate."""

    max_host_fraction: float = 0.5
    window_seconds: float = 300.0
    min_hosts: int = 2  # never trip on fewer hosts than this (a 2-host demo fleet)
    # The fleet the fraction is of: the hosts heard within this long. A host gone for longer (retired, or
    # down for a week) no longer makes the breaker more lenient than the fleet that is really there.
    fleet_seconds: float = 86400.0
    repairs_per_hour: int = 3  # at most max(this, repairs_fraction_per_hour * hosts) per hour
    repairs_fraction_per_hour: float = 0.1
    actions: tuple[RepairAction, ...] = (
        RepairAction.RESET_GPU,
        RepairAction.REBOOT_NODE,
        RepairAction.DRAIN,
        RepairAction.DOWN,
        RepairAction.RESTART_APP,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A repair that failed (Slurm down, a command that exited non-zero) is asked for again, while its
    incident is still acting: after `first_delay_seconds`, doubling each time, `attempts` in all. Only the
    listed actions, whose carrying out is idempotent (a node already drained for the incident is left as it
    is); a failed GPU reset or reboot waits for a person."""

    actions: tuple[RepairAction, ...] = (RepairAction.DRAIN, RepairAction.DOWN)
    attempts: int = 5  # the first one included
    first_delay_seconds: float = 60.0

    def delay_seconds(self, failed: int) -> float:
        """The wait after the `failed`-th failed attempt (1, 2, ...)."""
        return self.first_delay_seconds * 2.0 ** max(failed - 1, 0)


@dataclass(frozen=True, slots=True)
class SelfcheckPolicy:
    """What `fleetguard selfcheck` requires of a host before it takes work again."""

    # All-reduce among the host's GPUs, NCCL bus bandwidth (the nccl-tests definition). An NVLink H100
    # host reaches several hundred GB/s on large messages; PCIe-only hosts tens: set it to your hardware.
    min_nccl_busbw_gbps: float = 40.0
    # The same code path on CPU through gloo (hosts without GPUs, CI): it only proves the path works.
    min_gloo_busbw_gbps: float = 0.01
    allreduce_mib: float = 64.0  # message size (gloo uses an eighth of it)
    allreduce_iterations: int = 5
    compute_matrix_size: int = 2048  # an n x n fp32 matmul per GPU, checked against a float64 reference
    compute_relative_tolerance: float = 1e-3
    memory_test_mib: float = 1024.0  # written with a pattern and read back per GPU
    nic_error_increase_max: int = 0  # error counters (the policy's counter rules) may rise this much
    timeout_seconds: float = 120.0


@dataclass(frozen=True, slots=True)
class Policy:
    xid: dict[int, XidRule]
    xid_default: XidRule
    events: dict[str, EventRule]
    counters: dict[str, CounterRule]
    gpu: GpuRules = field(default_factory=GpuRules)
    findings: dict[str, FindingRule] = field(default_factory=dict)
    cancellations: tuple[Cancellation, ...] = ()
    escalation: Escalation = field(default_factory=Escalation)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    burst_seconds: float = 180.0  # repeats closer than this are one burst (one occurrence toward min_count)
    selfcheck: SelfcheckPolicy = field(default_factory=SelfcheckPolicy)

    def xid_rule(self, xid: int) -> XidRule:
        return self.xid.get(xid) or XidRule(
            xid=xid,
            name=f"XID {xid}",
            severity=self.xid_default.severity,
            action=self.xid_default.action,
            min_count=self.xid_default.min_count,
            count_window_seconds=self.xid_default.count_window_seconds,
            sticky_seconds=self.xid_default.sticky_seconds,
            application=self.xid_default.application,
            storm_lines=self.xid_default.storm_lines,
        )

    def cancels(self, fault: str) -> tuple[str, ...]:
        """The faults a healthy observation of `fault` clears (itself always)."""
        return (fault, *(c.fault for c in self.cancellations if c.by == fault and c.fault != fault))
