"""Carries out one planned action and records it: checkpoint and stop requests go to the ranks through the
command queue, restart kills the local worker group (or runs the configured argv), cordon runs its argv."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fleetguard.actions.terminate import terminate_group
from fleetguard.argv import render_argv, run_argv, run_as_for
from fleetguard.clock import Clock, SystemClock
from fleetguard.jobcontrol.commands import CommandQueue
from fleetguard.jobcontrol.trust import ProcessIdentity, job_owner
from fleetguard.records.action_requests import ActionKind, ActionRequest
from fleetguard.records.findings import ActionOutcome, ActionRecord

__all__ = ["ActionExecutor", "ActionRequest", "ExecutorConfig"]

log = logging.getLogger(__name__)

ACTIONS = frozenset(ActionKind)


@dataclass(frozen=True)
class ExecutorConfig:
    host: str
    restart_grace_seconds: float = 10.0
    restart_command: tuple[str, ...] = ()  # argv with {job} {host} {rank} {pid}; empty: kill the worker group
    cordon_command: tuple[str, ...] = ()  # argv; empty: cordon is recorded as skipped
    # argv that ends the job at its scheduler (scancel, kubectl delete job); empty: only the ranks are asked
    stop_command: tuple[str, ...] = ()
    command_timeout_seconds: float = 60.0


class ActionExecutor:
    """`execute` never raises: a failure becomes an ActionRecord with outcome "failed" and the error."""

    def __init__(
        self,
        config: ExecutorConfig,
        clock: Clock,
        commands: CommandQueue,
        # job key -> {rank: its process when the agent may signal it, else None} of live local ranks
        local_ranks: Callable[[str], Mapping[int, ProcessIdentity | None]],
        process_clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        # Waiting for real processes to exit needs real time even when records are stamped by a fake clock.
        self.process_clock = process_clock if process_clock is not None else SystemClock()
        self.commands = commands
        self.local_ranks = local_ranks

    def execute(self, request: ActionRequest) -> ActionRecord:
        try:
            outcome, detail = self._dispatch(request)
        except Exception as exc:
            log.exception("action %s for job %s failed", request.action, request.job_id)
            outcome, detail = ActionOutcome.FAILED, f"{type(exc).__name__}: {exc}"
        record = ActionRecord(
            ts=self.clock.time(),
            action_id=f"act-{uuid.uuid4().hex[:16]}",
            action=request.action,
            target=self._target(request),
            finding_id=request.evidence_id,
            outcome=outcome,
            detail=f"{request.reason}; {detail}" if request.reason else detail,
        )
        log.info("action %s -> %s: %s (%s)", record.action, record.target, record.outcome, record.detail)
        return record

    def _target(self, request: ActionRequest) -> str:
        # a `none` that names a host is a host action the policy refused (a cordon without host evidence)
        if request.action == ActionKind.CORDON or (request.action == ActionKind.NONE and request.host):
            return f"host/{request.host or self.config.host}"
        return f"job/{request.job_id}@{self.config.host}"

    def _dispatch(self, request: ActionRequest) -> tuple[ActionOutcome, str]:
        if request.action not in ACTIONS:
            return ActionOutcome.FAILED, f"unknown action {request.action!r}"
        if request.action == ActionKind.NONE:
            return ActionOutcome.SKIPPED, "policy chose no action"
        if request.action == ActionKind.CHECKPOINT:
            return self._ask_ranks(request.job_id, "checkpoint", request.reason)
        if request.action == ActionKind.STOP_CRASH_LOOP:
            return self._stop(request)
        if request.action == ActionKind.RESTART:
            return self._restart(request)
        return self._cordon(request)

    def _ask_ranks(self, job_id: str, kind: str, reason: str) -> tuple[ActionOutcome, str]:
        ranks = sorted(self.local_ranks(job_id))
        if not ranks:
            return ActionOutcome.SKIPPED, f"no live local ranks of job {job_id} to ask"
        command = self.commands.push(job_id, ranks, kind, reason)
        return ActionOutcome.REQUESTED, f"{kind} command {command.command_id} queued for ranks {ranks}"

    def _restart(self, request: ActionRequest) -> tuple[ActionOutcome, str]:
        ranks = dict(self.local_ranks(request.job_id))
        if self.config.restart_command:
            return self._run(self.config.restart_command, request, ranks, as_owner=True)
        targets = {rank: ident for rank, ident in ranks.items() if ident is not None}
        owner_uid, _ = job_owner(request.job_id)
        if not targets or owner_uid is None:
            return ActionOutcome.SKIPPED, f"no live local ranks of job {request.job_id} the agent may signal"
        outcome = terminate_group(
            list(targets.values()), owner_uid, self.config.restart_grace_seconds, self.process_clock
        )
        pids = sorted(t.pid for t in targets.values())
        detail = f"killed local worker group {sorted(targets)} (pids {pids}): {outcome.describe()}"
        return (ActionOutcome.SUCCEEDED if outcome.ok else ActionOutcome.FAILED), detail

    def _stop(self, request: ActionRequest) -> tuple[ActionOutcome, str]:
        """Ask the ranks to stop (taken at their next step boundary) and, when configured, end the job at its
        scheduler: a group that crashes before its first step never takes the ranks' command."""
        asked, asked_detail = self._ask_ranks(request.job_id, "stop", request.reason)
        if not self.config.stop_command:
            return asked, asked_detail
        ranks = dict(self.local_ranks(request.job_id))
        outcome, detail = self._run(self.config.stop_command, request, ranks, as_owner=True)
        return outcome, f"{detail}; ranks: {asked_detail}"

    def _cordon(self, request: ActionRequest) -> tuple[ActionOutcome, str]:
        if not self.config.cordon_command:
            return ActionOutcome.SKIPPED, "no cordon command configured (runtime.cordon_command)"
        # a host action, run as the agent (off unless an operator sets runtime.cordon_* and cordon_command)
        return self._run(self.config.cordon_command, request, dict(self.local_ranks(request.job_id)))

    def _run(
        self,
        template: Sequence[str],
        request: ActionRequest,
        ranks: Mapping[int, ProcessIdentity | None],
        as_owner: bool = False,
    ) -> tuple[ActionOutcome, str]:
        """Run an operator's command. One that acts on a job (`as_owner`: restart, stop) runs with the job
        owner's authority: any local user can report a job under any id (root's Slurm job's) and fake the
        finding behind a restart, and `scancel {job}` run as root would end a job that user could not."""
        target = ranks.get(request.rank) if request.rank is not None else None
        values = {
            "job": job_owner(request.job_id)[1],  # the id the ranks reported (the scheduler's), not the key
            "host": (request.host or self.config.host)
            if request.action == ActionKind.CORDON
            else self.config.host,
            "rank": request.rank,
            "pid": target.pid if target is not None else None,
        }
        run_as = run_as_for(job_owner(request.job_id)[0]) if as_owner else None
        result = run_argv(render_argv(template, values), self.config.command_timeout_seconds, run_as)
        who = f" as uid {run_as.uid}" if run_as is not None else ""
        detail = f"ran {list(result.argv)}{who} -> rc={result.returncode} {result.output.strip()[-300:]}"
        return (ActionOutcome.SUCCEEDED if result.ok else ActionOutcome.FAILED), detail
