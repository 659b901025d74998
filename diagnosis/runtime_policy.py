"""What to do about a training-runtime finding: checkpoint, restart, cordon, stop a crash loop, or nothing.

Pure decisions over a finding, the job's action history and the policy config; the runtime executes the
plans in order (a checkpoint before the restart that follows it), records each one with its outcome and
reports back whether each restart succeeded.
- dead rank or error status: restart (a broken job cannot checkpoint);
- hang: restart from the previous checkpoint (stuck collectives cannot checkpoint), decided on the
  `hang_localised` finding so a mismatched-collective program bug is alerted, not restarted or evicted;
- straggler: checkpoint then restart, only once the time it already cost exceeds the cost of a restart; a
  rank still slow after its restart is acted on again only if its host can be cordoned (the default restart
  brings it back on the same GPU), otherwise it is left to a person;
- at-risk GPU: checkpoint (then restart without the node and cordon it, if configured);
- a host action (cordon) needs host evidence (diagnosis.host_evidence: a fault the agent saw itself on the
  suspect's GPU) for a finding the ranks' reports raised: a hang or a straggler only ranks report restarts
  that job alone (as its owner), whatever `cordon_gpu_hang` / `cordon_stragglers` say;
- no restart within a cooldown of the last (one fault, one restart): the plan says when the cooldown ends so
  a fault that is still there then is planned again; a crash loop (checkpoint step not advanced over N
  successful restarts, or without checkpoints N restarts within a window) stops instead of restarting again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from diagnosis.host_evidence import NO_HOST_EVIDENCE, HostEvidence
from fleetguard.records.evidence import hang_evidence, straggler_evidence
from fleetguard.records.findings import Finding, FindingKind

ACTIONS = ("checkpoint", "restart", "cordon", "stop_crash_loop", "none")
# Findings the agent raises from its own signals (GPU risk scored from NVML): host evidence themselves.
# Every other runtime finding comes from what ranks report, which any local user can make say anything.
HOST_FINDING_KINDS = frozenset({FindingKind.AT_RISK_GPU})


@dataclass(frozen=True, slots=True)
class ActionPolicyConfig:
    restart_cost_seconds: float = 300.0  # lost time a restart costs (teardown, rendezvous, reload, replay)
    cooldown_seconds: float = 120.0
    max_restarts_without_progress: int = 3
    # A job that never reports a checkpoint: this many restarts within the window are a crash loop.
    crash_loop_window_seconds: float = 1800.0
    cordon_at_risk_gpu: bool = False  # at-risk GPU: also restart without the node and cordon its host
    cordon_gpu_hang: bool = False  # hang localised to a blocked GPU stream: cordon the suspect's host
    cordon_stragglers: bool = False  # straggler restart: cordon the slow rank's host so it is left out
    # A cordon really takes a host out only when a cordon command is configured; without one it is recorded
    # as skipped, so a restart cannot leave a slow host behind.
    cordon_command_configured: bool = False
    # The agent ships to a fleet controller, which sees a multi-node job whole: a hang of a job that spans
    # hosts is the controller's to restart (on the culprit's host), so this agent must not restart it too.
    controller_acts_on_multi_host_hangs: bool = False
    # How far before a finding a host fault still bears on it (a GPU that failed, then a hang detected once
    # the heartbeat timeouts ran out).
    host_evidence_window_seconds: float = 1800.0

    def __post_init__(self) -> None:
        if self.restart_cost_seconds < 0 or self.cooldown_seconds < 0:
            raise ValueError("restart_cost_seconds and cooldown_seconds must be >= 0")
        if not 0 < self.host_evidence_window_seconds < float("inf"):
            raise ValueError("host_evidence_window_seconds must be positive and finite")
        if self.max_restarts_without_progress < 1:
            raise ValueError("max_restarts_without_progress must be >= 1")
        if self.crash_loop_window_seconds <= 0:
            raise ValueError("crash_loop_window_seconds must be > 0")


@dataclass(frozen=True, slots=True)
class RestartMark:
    ts: float  # when the restart was ordered
    checkpoint_step: int | None  # the latest complete checkpoint when it was ordered (or when it completed)
    finding_id: str | None = None
    kind: FindingKind | None = (
        None  # the finding kind it answered (a straggler restart is judged by its rank)
    )
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class JobActionState:
    """What has been done to one job so far; updated by pure `with_*` methods that return a new state."""

    job_id: str
    restarts: tuple[RestartMark, ...] = ()  # restarts that succeeded (the crash-loop evidence)
    ordered: tuple[RestartMark, ...] = ()  # restarts ordered whose outcome is not known yet
    last_restart_at: float | None = None  # the latest restart ordered, whatever its outcome (cooldown)
    latest_checkpoint_step: int | None = None
    last_checkpoint_request_at: float | None = None
    stopped: bool = False

    def with_checkpoint(self, step: int) -> JobActionState:
        """A checkpoint of `step` completed (steps only move forward)."""
        if self.latest_checkpoint_step is not None and step <= self.latest_checkpoint_step:
            return self
        return replace(self, latest_checkpoint_step=step)

    def with_restart_ordered(self, mark: RestartMark) -> JobActionState:
        """A restart was ordered: the cooldown starts now; it counts once it has succeeded."""
        return replace(
            self, ordered=(*self.ordered, mark), last_restart_at=_latest(self.last_restart_at, mark.ts)
        )

    def with_restart_outcome(self, finding_id: str | None, succeeded: bool) -> JobActionState:
        """The restart ordered for `finding_id` was carried out: only a successful one is counted. A failed or
        skipped one still holds the cooldown, so a failing restart command is not run again at once."""
        mark = next((m for m in self.ordered if m.finding_id == finding_id), None)
        if mark is None:
            return self
        ordered = tuple(m for m in self.ordered if m is not mark)
        if not succeeded:
            return replace(self, ordered=ordered)
        done = replace(mark, checkpoint_step=self.latest_checkpoint_step)
        return replace(self, ordered=ordered, restarts=(*self.restarts, done))

    def with_restart(self, ts: float) -> JobActionState:
        """A restart ordered at `ts` succeeded (shorthand for ordered + outcome)."""
        mark = RestartMark(ts, self.latest_checkpoint_step)
        return replace(
            self, restarts=(*self.restarts, mark), last_restart_at=_latest(self.last_restart_at, ts)
        )

    def with_checkpoint_request(self, ts: float) -> JobActionState:
        return replace(self, last_checkpoint_request_at=ts)

    def with_stop(self) -> JobActionState:
        return replace(self, stopped=True)

    def resumed(self) -> JobActionState:
        """An operator fixed the job and lets the policy restart it again."""
        return replace(self, stopped=False, restarts=())


@dataclass(frozen=True, slots=True)
class ActionPlan:
    action: str  # checkpoint | restart | cordon | stop_crash_loop | none
    target: str  # "job/<id>" or "host/<name>"
    finding_id: str
    reason: str
    job_id: str | None = None
    host: str | None = None  # cordon: the host; restart: the slow or failing host, where known
    rank: int | None = None
    finding_kind: FindingKind | None = None
    # `none` only because of the restart cooldown: decide again at this time if the fault is still there
    retry_at: float | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}; expected one of {ACTIONS}")


def decide(
    finding: Finding,
    state: JobActionState,
    config: ActionPolicyConfig,
    host: HostEvidence = NO_HOST_EVIDENCE,
) -> list[ActionPlan]:
    """The plans for one finding, in execution order; a `none` plan says why nothing is done. `host`: the
    faults the agent itself saw that bear on the finding (what a cordon needs besides the ranks' word)."""
    job = finding.job_id or state.job_id
    target = f"job/{job}"
    kind = finding.kind
    hang = hang_evidence(finding)

    def plan(
        action: str,
        reason: str,
        *,
        target: str = target,
        host: str | None = None,
        retry_at: float | None = None,
    ) -> ActionPlan:
        return ActionPlan(action, target, finding.finding_id, reason, job, host, finding.rank, kind, retry_at)

    if state.stopped:
        return [plan("none", "restarts are stopped for this job (crash loop); an operator must resume it")]

    if kind in (FindingKind.DEAD_RANK, FindingKind.RANK_ERROR):
        return _restart(plan, finding, state, config, f"{kind}: a broken job cannot checkpoint; restart")

    if kind == FindingKind.HUNG_RANK:
        return [plan("none", "a hang is acted on through its hang_localised finding, which says what kind")]

    if kind == FindingKind.HANG_LOCALISED:
        hang_kind = hang.hang_kind or ""
        if hang_kind == "collective_mismatch":
            return [plan("none", "mismatched collectives are a program bug: alert, no restart, no eviction")]
        if config.controller_acts_on_multi_host_hangs and hang.spans_hosts is True:
            return [
                plan(
                    "none",
                    "the job spans hosts: the fleet controller, which sees them all, restarts the culprit's",
                )
            ]
        plans = _restart(
            plan, finding, state, config, f"hang ({hang_kind}): restart from the previous checkpoint"
        )
        if (
            config.cordon_gpu_hang
            and hang.evict_hardware is True
            and finding.host
            and plans[0].action == "restart"
        ):
            if _host_backed(finding, host):
                why = f"GPU stream blocked on this host, and the host saw {host.describe()}"
                plans.append(plan("cordon", why, target=f"host/{finding.host}", host=finding.host))
            else:
                plans.append(_no_cordon(plan, finding.host, "this hang"))
        return plans

    if kind == FindingKind.STRAGGLER:
        lost = straggler_evidence(finding).lost_seconds
        if lost is None or lost <= config.restart_cost_seconds:
            return [
                plan(
                    "none",
                    f"straggler has cost {lost or 0.0:.0f} s, not yet over the "
                    f"{config.restart_cost_seconds:.0f} s a restart costs",
                )
            ]
        cordon = config.cordon_stragglers and _host_backed(finding, host)
        can_exclude = cordon and config.cordon_command_configured and bool(finding.host)
        earlier = _straggler_restart_of(state, finding.rank)
        if earlier is not None and not can_exclude:
            return [
                plan(
                    "none",
                    f"rank {finding.rank} is a straggler again after the restart at {earlier.ts:.0f}: the "
                    f"restart did not help (it runs on the same GPU again) and its host "
                    f"{finding.host or 'unknown'} cannot be cordoned (runtime.cordon_stragglers and "
                    f"runtime.cordon_command, and a fault the host itself saw); a person must look",
                )
            ]
        plans = _checkpoint_then_restart(
            plan, finding, state, config, f"straggler cost {lost:.0f} s > restart cost", cordon
        )
        if config.cordon_stragglers and not cordon and finding.host and plans[-1].action == "restart":
            plans.append(_no_cordon(plan, finding.host, "this straggler"))
        return plans

    if kind == FindingKind.AT_RISK_GPU:
        if not config.cordon_at_risk_gpu:
            if _in_cooldown(state.last_checkpoint_request_at, finding.ts, config):
                return [plan("none", "a checkpoint was requested within the cooldown")]
            return [plan("checkpoint", "GPU at risk: save progress while it still works")]
        return _checkpoint_then_restart(plan, finding, state, config, "GPU at risk", True)

    return [plan("none", f"no runtime action for {kind} findings")]


def _host_backed(finding: Finding, host: HostEvidence) -> bool:
    """A host action may follow: the finding is the host's own, or the host saw a fault that bears on it."""
    return finding.kind in HOST_FINDING_KINDS or host.corroborates


def _no_cordon(plan: _Plan, host_name: str, what: str) -> ActionPlan:
    return plan(
        "none",
        f"not cordoning {host_name}: only the job's ranks report {what}, and what ranks report never makes "
        "the agent act on the host; a cordon needs a fault the host saw itself on the suspect's GPU (a "
        "hardware XID, a GPU off the bus or lost) or an operator",
        target=f"host/{host_name}",
        host=host_name,
    )


def apply_plans(state: JobActionState, plans: list[ActionPlan], now: float) -> JobActionState:
    """The state after the plans were ordered; report each restart's outcome with `with_restart_outcome`."""
    for p in plans:
        if p.action == "restart":
            mark = RestartMark(now, state.latest_checkpoint_step, p.finding_id, p.finding_kind, p.rank)
            state = state.with_restart_ordered(mark)
        elif p.action == "checkpoint":
            state = state.with_checkpoint_request(now)
        elif p.action == "stop_crash_loop":
            state = state.with_stop()
    return state


def crash_looping(state: JobActionState, config: ActionPolicyConfig, now: float) -> bool:
    """The latest checkpoint is no later than it was `max_restarts_without_progress` successful restarts ago;
    for a job that never reported a checkpoint, that many restarts within `crash_loop_window_seconds`."""
    n = config.max_restarts_without_progress
    latest = state.latest_checkpoint_step
    if latest is None:
        # No progress signal at all: restarts must age out, or any n restarts over a long life would stop it.
        recent = [m for m in state.restarts if now - m.ts < config.crash_loop_window_seconds]
        return len(recent) >= n
    if len(state.restarts) < n:
        return False
    then = state.restarts[-n].checkpoint_step
    return then is not None and latest <= then


class _Plan(Protocol):
    def __call__(
        self,
        action: str,
        reason: str,
        *,
        target: str = ...,
        host: str | None = None,
        retry_at: float | None = None,
    ) -> ActionPlan: ...


def _restart(
    plan: _Plan, finding: Finding, state: JobActionState, config: ActionPolicyConfig, reason: str
) -> list[ActionPlan]:
    last = state.last_restart_at
    if last is not None and _in_cooldown(last, finding.ts, config):
        ends = last + config.cooldown_seconds
        return [
            plan(
                "none",
                f"the job was restarted within the cooldown (it ends at {ends:.0f}): this is taken as the "
                "same fault; if the job is still stuck when the cooldown ends it is planned again",
                retry_at=ends,
            )
        ]
    if crash_looping(state, config, finding.ts):
        if state.latest_checkpoint_step is None:
            why = (
                f"{config.max_restarts_without_progress} restarts within "
                f"{config.crash_loop_window_seconds:.0f} s and no checkpoint ever reported"
            )
        else:
            why = (
                f"checkpoint step {state.latest_checkpoint_step} has not advanced over "
                f"{config.max_restarts_without_progress} restarts"
            )
        return [plan("stop_crash_loop", why)]
    return [plan("restart", reason)]


def _checkpoint_then_restart(
    plan: _Plan,
    finding: Finding,
    state: JobActionState,
    config: ActionPolicyConfig,
    reason: str,
    cordon: bool,
) -> list[ActionPlan]:
    if cordon and finding.host:
        how = f"restart, and cordon host {finding.host} so the job is placed without it"
    else:
        how = "restart (the worker group comes back on the same hosts)"
    restart = _restart(plan, finding, state, config, f"{reason}: {how}")
    if restart[0].action != "restart":
        return restart
    out = [plan("checkpoint", f"{reason}: checkpoint at the next step boundary first")]
    out.append(plan("restart", restart[0].reason, host=finding.host))
    if cordon and finding.host:
        out.append(
            plan(
                "cordon",
                f"{reason}: keep the job off this host",
                target=f"host/{finding.host}",
                host=finding.host,
            )
        )
    return out


def _straggler_restart_of(state: JobActionState, rank: int | None) -> RestartMark | None:
    """The latest successful restart that answered a straggler on `rank`."""
    if rank is None:
        return None
    return next(
        (m for m in reversed(state.restarts) if m.kind == FindingKind.STRAGGLER and m.rank == rank), None
    )


def _in_cooldown(last: float | None, now: float, config: ActionPolicyConfig) -> bool:
    return last is not None and now - last < config.cooldown_seconds


def _latest(a: float | None, b: float) -> float:
    return b if a is None else max(a, b)
