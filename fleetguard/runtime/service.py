"""RuntimeService: the agent-side training runtime in one object. It receives reports from local ranks,
watches their PIDs, runs the analyzer (straggler/) every tick, asks the policy (diagnosis/) what to do about
each finding, has the executor do it, and hands every record, finding and action to `sink` (the agent's
store buffer).

Usable standalone::

    service = RuntimeService(RuntimeServiceConfig(host="node1"), SystemClock(), sink=print)
    service.start(); ...; service.stop()
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from fleetguard.actions.executor import ActionExecutor, ExecutorConfig
from fleetguard.argv import check_template
from fleetguard.clock import Clock
from fleetguard.jobcontrol.commands import Command, CommandQueue
from fleetguard.jobcontrol.procfs import is_alive
from fleetguard.records.action_requests import ActionKind, ActionRequest
from fleetguard.records.findings import ActionOutcome, ActionRecord, Finding
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from fleetguard.runtime.crashes import CrashTracker
from fleetguard.runtime.dump_watcher import DumpWatcher
from fleetguard.runtime.pid_watcher import PidWatcher, ProcessExit
from fleetguard.runtime.protocol import RankReport
from fleetguard.runtime.ranks import JobInfo, RankRegistry, RuntimeLimits
from fleetguard.runtime.server import RuntimeServer, Stopping, require_loopback

if TYPE_CHECKING:
    from diagnosis.host_evidence import HostEvidence
    from diagnosis.runtime_policy import ActionPolicyConfig, JobActionState
    from fleetguard.config import Config
    from fleetguard.runtime.host_signals import HostSignals

log = logging.getLogger(__name__)

Sink = Callable[[Sequence[object]], None]
RuntimeRecord = Heartbeat | StepTiming | CollectiveProgress
HOST_EVIDENCE_LAG_SECONDS = 60.0


@dataclass(frozen=True)
class RuntimeServiceConfig:
    host: str
    port: int = 9477  # 0: any free port (tests); read the bound one from RuntimeService.port
    bind_address: str = "127.0.0.1"  # loopback only; anything else is refused
    tick_interval_seconds: float = 0.5
    pid_poll_interval_seconds: float = 0.2
    restart_grace_seconds: float = 10.0
    restart_command: tuple[
        str, ...
    ] = ()  # argv, {job} {host} {rank} {pid}; empty: kill the local worker group
    cordon_command: tuple[str, ...] = ()
    stop_command: tuple[str, ...] = ()  # crash loop: end the job at its scheduler as well as asking the ranks
    restart_cost_seconds: float = 300.0
    checkpoint_timeout_seconds: float = 120.0  # restart anyway if a requested checkpoint does not complete
    command_timeout_seconds: float = 60.0
    policy: dict[str, Any] = field(default_factory=dict)  # extra ActionPolicyConfig fields, by name
    flight_recorder_dir: str = ""  # where PyTorch writes nccl_trace_rank_<r> dumps; empty: not read
    limits: RuntimeLimits = field(default_factory=RuntimeLimits)  # jobs and ranks held, per uid and in all

    def __post_init__(self) -> None:
        require_loopback(self.bind_address)
        for template in (self.restart_command, self.cordon_command, self.stop_command):
            if template:
                check_template(template)
        policy_config(self)  # a bad policy setting fails here, not at the first finding


def policy_config(config: RuntimeServiceConfig) -> ActionPolicyConfig:
    """The action policy's settings: `policy` plus what the service itself knows (restart cost, whether a
    cordon command exists)."""
    from diagnosis.runtime_policy import ActionPolicyConfig

    return ActionPolicyConfig(
        restart_cost_seconds=config.restart_cost_seconds,
        cordon_command_configured=bool(config.cordon_command),
        **config.policy,
    )


def runtime_config_from(config: Config) -> RuntimeServiceConfig:
    """The service's settings from the `[runtime]` section of the fleetguard config."""
    rt = config.runtime
    return RuntimeServiceConfig(
        host=config.host,
        port=rt.port,
        restart_grace_seconds=rt.restart_grace_seconds,
        restart_command=tuple(rt.restart_command),
        cordon_command=tuple(rt.cordon_command),
        stop_command=tuple(rt.stop_command),
        restart_cost_seconds=rt.restart_cost_seconds,
        checkpoint_timeout_seconds=rt.checkpoint_timeout_seconds,
        command_timeout_seconds=rt.command_timeout_seconds,
        flight_recorder_dir=rt.flight_recorder_dir,
        limits=RuntimeLimits(
            max_jobs_per_uid=rt.max_jobs_per_uid,
            max_ranks_per_uid=rt.max_ranks_per_uid,
            max_jobs=rt.max_jobs,
            max_ranks=rt.max_ranks,
            job_idle_seconds=rt.job_idle_seconds,
        ),
        policy={
            "cooldown_seconds": rt.cooldown_seconds,
            "max_restarts_without_progress": rt.max_restarts_without_progress,
            "crash_loop_window_seconds": rt.crash_loop_window_seconds,
            "cordon_at_risk_gpu": rt.cordon_at_risk_gpu,
            "cordon_gpu_hang": rt.cordon_gpu_hang,
            "cordon_stragglers": rt.cordon_stragglers,
            "controller_acts_on_multi_host_hangs": config.agent.ships_to_controller,
        },
    )


class ServiceStopping(Stopping):
    """The service has made its final flush: a report now would be acknowledged and lost (answered 503)."""


class Analyzer(Protocol):
    """What the service needs from straggler.analysis.RuntimeAnalyzer."""

    def register_job(
        self, job_id: str, world_size: int, started_at: float, *, local_ranks: Iterable[int] = ()
    ) -> None: ...

    def forget_job(self, job_id: str) -> None: ...

    def observe(self, record: RuntimeRecord) -> None: ...

    def process_exited(
        self,
        job_id: str,
        rank: int,
        exit_code: int | None,
        now: float,
        detail: Mapping[str, object] | None = None,
    ) -> None: ...

    def tick(self, now: float) -> list[Finding]: ...


JobLookup = Callable[[str], JobInfo | None]


class Planner(Protocol):
    """What the service needs from the action policy (PolicyPlanner)."""

    def __call__(self, finding: Finding, job: JobInfo | None) -> list[ActionRequest]:
        """The actions for a new finding, in execution order."""

    def replan_deferred(self, now: float, job_of: JobLookup) -> list[tuple[Finding, list[ActionRequest]]]:
        """Findings put off by the restart cooldown whose cooldown has ended, planned again."""

    def action_done(self, request: ActionRequest, record: ActionRecord, job: JobInfo | None) -> None:
        """The outcome of an executed request (only a restart that succeeded counts as one)."""

    def forget(self, job_id: str) -> None:
        """The job is gone (idle): drop its state."""


@dataclass
class ServiceStats:
    reports: int = 0
    findings: int = 0
    actions: int = 0
    tick_errors: int = 0
    expected_exits: int = 0
    collateral_exits: int = 0
    sink_errors: int = 0


class RuntimeService:
    """Owns the threads: HTTP server, PID watcher, analysis tick, action runner. `start()` then `stop()`."""

    def __init__(
        self,
        config: RuntimeServiceConfig,
        clock: Clock,
        sink: Sink,
        *,
        analyzer: Analyzer | None = None,
        planner: Planner | None = None,
        host_signals: HostSignals | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.sink = sink
        self.stats = ServiceStats()
        self.commands = CommandQueue()
        self.ranks = RankRegistry(config.limits)
        self.analyzer = analyzer if analyzer is not None else _default_analyzer(config)
        # The agent's own hardware faults; None: no host evidence at all, so no host action on ranks' word.
        self.host_signals = host_signals
        self._evidence_window_seconds = policy_config(config).host_evidence_window_seconds
        self.planner = planner if planner is not None else PolicyPlanner(config, self.host_evidence)
        self.executor = ActionExecutor(
            ExecutorConfig(
                host=config.host,
                restart_grace_seconds=config.restart_grace_seconds,
                restart_command=config.restart_command,
                cordon_command=config.cordon_command,
                stop_command=config.stop_command,
                command_timeout_seconds=config.command_timeout_seconds,
            ),
            clock,
            self.commands,
            self.ranks.live_ranks,
        )
        self.server = RuntimeServer(self.handle_report, config.host, clock, config.bind_address, config.port)
        self.watcher = PidWatcher(self.handle_exit, config.pid_poll_interval_seconds)
        self._dumps = (
            DumpWatcher(config.flight_recorder_dir, config.host) if config.flight_recorder_dir else None
        )
        self._analysis_lock = threading.Lock()
        self._pending: list[object] = []
        self._pending_lock = threading.Lock()
        self._closed = False  # the final flush is done: nothing more is buffered (or acknowledged)
        self._expected_exits: set[int] = set()
        self.crashes = CrashTracker()
        self._actions: queue.Queue[tuple[Finding, list[ActionRequest]] | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ---- lifecycle ----

    def start(self) -> None:
        self.server.start()
        self.watcher.start()
        for target, name in ((self._tick_loop, "tick"), (self._action_loop, "actions")):
            thread = threading.Thread(target=target, name=f"fleetguard-runtime-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("training runtime listening on %s", self.endpoint)

    def stop(self) -> None:
        """Stop accepting reports (in-flight ones are answered), end the tick, action and watcher threads,
        then the final flush hands everything buffered to the sink. A report that reaches the service after
        that is refused (503), never acknowledged and lost. Call it before the sink's own final flush."""
        self.server.stop()
        self._stop.set()
        self._actions.put(None)
        for thread in self._threads:
            thread.join(timeout=self.config.restart_grace_seconds + 10)
        self.watcher.stop()
        if self._dumps is not None:
            self._dumps.close()
        self.flush(final=True)

    # ---- inputs (called from server / watcher threads; public for tests) ----

    def handle_report(self, report: RankReport) -> list[Command]:
        hb = report.heartbeat
        # LimitExceeded (over the job and rank limits) goes back to the server: answered 429, nothing kept
        new_incarnation = self.ranks.update(
            hb, report.checkpoint_step, report.process, expected_ranks=len(report.local_ranks())
        )
        if report.process is not None:
            self.watcher.watch(hb.pid, report.key)
        if report.error is not None or report.collectives:
            waiting = any(c.last_enqueued > c.last_completed for c in report.collectives)
            self.crashes.reported(hb.job_id, self.ranks.restarts(hb.job_id), hb.rank, report.error, waiting)
        records: list[RuntimeRecord] = [hb, *report.timings, *report.collectives]
        with self._analysis_lock:
            if new_incarnation:
                # a checkpoint asked of the group that is gone is moot (a stop still applies to the new one)
                self.commands.discard(hb.job_id, "checkpoint")
                # progress and silence of the old worker group must not count against the new one; only
                # this host's ranks are expected here (a multi-node job's others report elsewhere)
                self.analyzer.register_job(hb.job_id, hb.world_size, hb.ts, local_ranks=report.local_ranks())
            for record in records:
                self.analyzer.observe(record)
        self._buffer(records)
        self.stats.reports += 1
        return self.commands.take(hb.job_id, hb.rank, report.acked)

    def handle_exit(self, process_exit: ProcessExit) -> None:
        job_id, rank = process_exit.key
        info = self.ranks.mark_exited(job_id, rank, process_exit.pid)
        if process_exit.pid in self._expected_exits:
            # we killed it (restart): not a crash, and not evidence of one
            self._expected_exits.discard(process_exit.pid)
            self.stats.expected_exits += 1
            return
        if info is None:
            return  # a pid this rank no longer uses
        incarnation = info.incarnation
        if incarnation < self.ranks.restarts(job_id):
            # a worker of a group that has already been replaced can die after its successors report
            self.stats.collateral_exits += 1
            return
        exit_code = process_exit.exit_code
        if exit_code is None and info.status == "finished":
            exit_code = 0  # it said goodbye before the watcher could read its exit status
        now = self.clock.time()
        if exit_code == 0:
            with self._analysis_lock:
                self.analyzer.process_exited(job_id, rank, exit_code, now)
            return
        if not self.crashes.exited(job_id, incarnation, rank, exit_code, now):
            # torchrun tears down the other workers after the first failure: consequences, not new crashes
            self.stats.collateral_exits += 1
            return
        self._name_crashes(now)

    def _name_crashes(self, now: float) -> None:
        """Each crashed worker group's culprit, once known, becomes its one dead_rank finding
        (straggler.crash: the rank that failed first in its own right, not the first process to exit)."""
        for verdict in self.crashes.due(now):
            culprit = verdict.culprit
            with self._analysis_lock:
                self.analyzer.process_exited(
                    verdict.job_id, culprit.rank, culprit.exit_code, now, verdict.detail()
                )

    # ---- loops ----

    def tick_once(self) -> list[Finding]:
        """One analysis round: findings -> sink, and their planned actions -> the action runner; findings the
        restart cooldown put off are planned again once it ends (the analyzer reports a hang only once)."""
        now = self.clock.time()
        self._evict_idle(now)
        self._name_crashes(now)
        self._read_dumps()
        with self._analysis_lock:
            findings = self.analyzer.tick(now)
        for finding, requests in self.planner.replan_deferred(now, self.ranks.job):
            log.warning(
                "runtime finding %s outlasted the restart cooldown: planned again", finding.finding_id
            )
            if requests:
                self._actions.put((finding, requests))
        if findings:
            self.stats.findings += len(findings)
            self._buffer(findings)
            for finding in findings:
                log.warning("runtime finding %s: %s", finding.kind, finding.summary)
                job = self.ranks.job(finding.job_id) if finding.job_id else None
                requests = self.planner(finding, job)
                if requests:
                    self._actions.put((finding, requests))
        self.flush()
        return findings

    def host_evidence(self, finding: Finding, job: JobInfo | None) -> HostEvidence:
        """The faults the agent saw itself that bear on a finding: on the GPUs of its suspect ranks' own
        (trusted) processes, within the policy's window before it."""
        from diagnosis.host_evidence import NO_HOST_EVIDENCE, suspect_ranks

        if self.host_signals is None or job is None:
            return NO_HOST_EVIDENCE
        pids = [
            info.process.pid
            for rank in suspect_ranks(finding)
            if (info := job.ranks.get(rank)) is not None and info.process is not None
        ]
        window = self._evidence_window_seconds
        # a fault logged a little after the hang was found (the driver's own watchdog) still bears on it
        return self.host_signals.evidence(pids, finding.ts - window, finding.ts + HOST_EVIDENCE_LAG_SECONDS)

    def plan_findings(self, findings: Sequence[Finding]) -> int:
        """Findings raised outside the runtime that name a job of this host (an at-risk GPU, named by
        fleetguard.agent.gpu_jobs): planned like its own, so that job is asked to checkpoint. The caller
        stores them. Returns how many led to actions."""
        planned = 0
        for finding in findings:
            job = self.ranks.job(finding.job_id) if finding.job_id else None
            if job is None:
                continue
            requests = self.planner(finding, job)
            if requests:
                self._actions.put((finding, requests))
                planned += 1
        return planned

    def _evict_idle(self, now: float) -> None:
        """Forget jobs none of whose ranks reported for `limits.job_idle_seconds`: every table keyed by job
        drops them, so what finished (or was faked) long ago holds no memory."""
        for job_id in self.ranks.evict_idle(now):
            with self._analysis_lock:
                self.analyzer.forget_job(job_id)
            self.commands.forget(job_id)
            self.planner.forget(job_id)
            self.crashes.forget(job_id)
            for pid, (watched_job, _) in self.watcher.watched().items():
                if watched_job == job_id:
                    self.watcher.unwatch(pid)
            log.info("runtime: job %s forgotten after %.0f s without a report", job_id, self._idle_seconds)

    @property
    def _idle_seconds(self) -> float:
        return self.config.limits.job_idle_seconds

    def wait_for_dumps(self, timeout_seconds: float) -> bool:
        """Wait until every flight-recorder dump queued by a tick has been read (the next tick takes the
        records); whether that happened in time."""
        return self._dumps is None or self._dumps.wait_idle(timeout_seconds)

    def _read_dumps(self) -> None:
        """New flight-recorder dumps -> collective progress for hang localisation. A dump does not say which
        job wrote it, so they are read while exactly one job runs on this host."""
        if self._dumps is None:
            return
        jobs = [j for j in self.ranks.jobs() if self.ranks.live_pids(j)]
        if len(jobs) != 1:
            return
        progress = self._dumps.poll(jobs[0])
        if progress:
            with self._analysis_lock:
                for record in progress:
                    self.analyzer.observe(record)
            self._buffer(progress)

    def run_actions(self, requests: Sequence[ActionRequest]) -> list[ActionRecord]:
        """Execute the requests in order (the plans for one finding, or what one controller command asks); a
        restart that follows a checkpoint request waits (up to checkpoint_timeout_seconds) for that
        checkpoint to complete first."""
        records: list[ActionRecord] = []
        checkpoint_before: int | None = None
        asked_checkpoint = False
        for request in requests:
            note = ""
            if (
                request.action == ActionKind.RESTART
                and asked_checkpoint
                and not self._wait_for_checkpoint(request.job_id, checkpoint_before)
            ):
                note = (
                    f"the requested checkpoint did not complete within "
                    f"{self.config.checkpoint_timeout_seconds:.0f} s: restarted from checkpoint step "
                    f"{self._checkpoint_step(request.job_id)}"
                )
            if request.action == ActionKind.CHECKPOINT:
                checkpoint_before = self._checkpoint_step(request.job_id)
            run = self._restart if request.action == ActionKind.RESTART else self.executor.execute
            record = run(request)
            if request.action == ActionKind.STOP_CRASH_LOOP:
                note = self._stop_delivery_note(record)
            if note:
                record = replace(record, detail=f"{record.detail}; {note}")
            if request.action == ActionKind.CHECKPOINT and record.outcome == ActionOutcome.REQUESTED:
                asked_checkpoint = True
            self.planner.action_done(request, record, self.ranks.job(request.job_id))
            records.append(record)
        self.stats.actions += len(records)
        self._buffer(records)
        self.flush()
        return records

    def flush(self, final: bool = False) -> None:
        """Hand what is buffered to the sink; after the `final` flush nothing more is taken."""
        with self._pending_lock:
            batch, self._pending = self._pending, []
            self._closed = self._closed or final
        if not batch:
            return
        try:
            self.sink(batch)
        except Exception:
            self.stats.sink_errors += 1
            log.exception("runtime: the sink refused %d records", len(batch))

    def _restart(self, request: ActionRequest) -> ActionRecord:
        """Restart through the executor. The group's pids are expected to exit while it runs (the kill), and
        the analyzer stops watching the group meant to go silent; a restart that did not succeed hands the
        ranks still alive back to crash detection and the analyzer, so a real crash of theirs is seen."""
        job_id = request.job_id
        pids = set(self.ranks.live_pids(job_id).values())
        self._expected_exits.update(pids)
        with self._analysis_lock:
            self.analyzer.forget_job(job_id)
        record = self.executor.execute(request)
        if record.outcome == ActionOutcome.SUCCEEDED:
            return record
        survivors = {pid for pid in pids & self._expected_exits if is_alive(pid)}
        self._expected_exits.difference_update(survivors)
        job = self.ranks.job(job_id)
        if survivors and job is not None:
            world_size = max(r.world_size for r in job.ranks.values())
            with self._analysis_lock:
                self.analyzer.register_job(
                    job_id, world_size, self.clock.time(), local_ranks=sorted(job.ranks)
                )
            log.warning(
                "job %s: restart %s; still watching pids %s", job_id, record.outcome, sorted(survivors)
            )
        return record

    def _stop_delivery_note(self, record: ActionRecord) -> str:
        if self.config.stop_command:
            return (
                "the job was ended through runtime.stop_command"
                if record.outcome == ActionOutcome.SUCCEEDED
                else ""
            )
        if record.outcome != ActionOutcome.REQUESTED:
            return "the stop was not delivered: no rank can receive it"
        note = (
            "delivered with each rank's next report and taken at its next step boundary; "
            "a rank that crashes before that never receives it"
        )
        if self.config.restart_command:
            note += "; runtime.restart_command is set, runtime.stop_command is not: the scheduler may restart"
        return note

    def _checkpoint_step(self, job_id: str) -> int | None:
        job = self.ranks.job(job_id)
        return job.checkpoint_step if job else None

    def _wait_for_checkpoint(self, job_id: str, before: int | None) -> bool:
        """True once the ranks report a checkpoint newer than `before`; False on the timeout."""
        deadline = self.clock.monotonic() + self.config.checkpoint_timeout_seconds
        while self.clock.monotonic() < deadline and not self._stop.is_set():
            step = self._checkpoint_step(job_id)
            if step is not None and (before is None or step > before):
                return True
            self.clock.sleep(0.1)
        log.warning("job %s: requested checkpoint did not complete in time; restarting anyway", job_id)
        return False

    def _buffer(self, records: Sequence[object]) -> None:
        with self._pending_lock:
            if self._closed:
                raise ServiceStopping("the runtime has stopped: its final flush is done")
            self._pending.extend(records)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.config.tick_interval_seconds):
            try:
                self.tick_once()
            except Exception:  # one bad round must not end analysis
                self.stats.tick_errors += 1
                log.exception("runtime analysis tick failed")

    def take_planned(self) -> list[tuple[Finding, list[ActionRequest]]]:
        """The actions planned for findings and not yet taken by the action thread, in order, taken off
        the queue: for a service that was not started (a tool or test that plans, then runs `run_actions`)."""
        planned: list[tuple[Finding, list[ActionRequest]]] = []
        while True:
            try:
                item = self._actions.get_nowait()
            except queue.Empty:
                return planned
            if item is None:  # stop()'s sentinel, for the action thread: left for it
                self._actions.put(None)
                return planned
            planned.append(item)

    def _action_loop(self) -> None:
        while True:
            item = self._actions.get()
            if item is None:
                return
            finding, requests = item
            try:
                self.run_actions(requests)
            except Exception:
                log.exception("runtime actions for finding %s failed", finding.finding_id)


def _default_analyzer(config: RuntimeServiceConfig) -> Analyzer:
    from straggler.analysis import RuntimeAnalyzer
    from straggler.scoring import StragglerConfig

    # a straggler is reported the moment the time it cost passes what a restart costs
    return RuntimeAnalyzer(straggler_config=StragglerConfig(action_cost_seconds=config.restart_cost_seconds))


@dataclass(frozen=True)
class _Deferred:
    """A finding the restart cooldown put off, and what the job looked like then."""

    finding: Finding
    retry_at: float
    incarnation: int  # the job's restart count
    step: int | None  # the furthest step any of its ranks had reached


class PolicyPlanner:
    """diagnosis.runtime_policy.decide behind the service: keeps each job's JobActionState (restarts ordered
    and their outcomes, latest complete checkpoint as the ranks report it), remembers findings put off by the
    restart cooldown, and turns ActionPlans into ActionRequests."""

    def __init__(
        self,
        config: RuntimeServiceConfig,
        host_evidence: Callable[[Finding, JobInfo | None], HostEvidence] | None = None,
    ) -> None:
        from diagnosis.runtime_policy import JobActionState

        self.policy_config = policy_config(config)
        self._host_evidence = host_evidence
        self._new_state = JobActionState
        self._states: dict[str, JobActionState] = {}
        self._deferred: dict[tuple[str, str], _Deferred] = {}  # (job, finding kind) -> the latest put off
        self._lock = threading.Lock()

    def state(self, job_id: str) -> JobActionState:
        """The job's JobActionState (what the policy has ordered so far)."""
        with self._lock:
            return self._states.get(job_id) or self._new_state(job_id)

    def __call__(self, finding: Finding, job: JobInfo | None) -> list[ActionRequest]:
        from diagnosis.host_evidence import NO_HOST_EVIDENCE
        from diagnosis.runtime_policy import apply_plans, decide

        job_id = finding.job_id or "unknown"
        host = self._host_evidence(finding, job) if self._host_evidence is not None else NO_HOST_EVIDENCE
        with self._lock:
            state = self._states.get(job_id) or self._new_state(job_id)
            if job is not None and job.checkpoint_step is not None:
                state = state.with_checkpoint(job.checkpoint_step)
            plans = decide(finding, state, self.policy_config, host)
            self._states[job_id] = apply_plans(state, plans, finding.ts)
            retry_at = next((p.retry_at for p in plans if p.retry_at is not None), None)
            if retry_at is not None and job is not None:
                self._deferred[(job_id, finding.kind)] = _Deferred(
                    finding, retry_at, job.restarts, _furthest_step(job)
                )
        return [
            ActionRequest(
                action=ActionKind(p.action),
                job_id=p.job_id or job_id,
                finding_id=p.finding_id,
                reason=p.reason,
                rank=p.rank,
                host=p.host,
            )
            for p in plans
        ]

    def replan_deferred(self, now: float, job_of: JobLookup) -> list[tuple[Finding, list[ActionRequest]]]:
        """Deferred findings whose cooldown has ended, decided again as of `now`, while the fault is still
        there: the same worker group, still alive, and not a step further than when it was put off (a
        straggler, or a hang that cleared, has moved on and is dropped)."""
        with self._lock:
            due = [key for key, d in self._deferred.items() if d.retry_at <= now]
            items = [self._deferred.pop(key) for key in due]
        out: list[tuple[Finding, list[ActionRequest]]] = []
        for d in items:
            job = job_of(d.finding.job_id or "unknown")
            if (
                job is None
                or not job.live_pids()
                or job.restarts != d.incarnation
                or _furthest_step(job) != d.step
            ):
                log.info("finding %s cleared during the restart cooldown", d.finding.finding_id)
                continue
            out.append((d.finding, self(replace(d.finding, ts=now), job)))
        return out

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._states.pop(job_id, None)
            for key in [k for k in self._deferred if k[0] == job_id]:
                del self._deferred[key]

    def action_done(self, request: ActionRequest, record: ActionRecord, job: JobInfo | None) -> None:
        if request.action != ActionKind.RESTART:
            return
        with self._lock:
            state = self._states.get(request.job_id)
            if state is None:
                return
            if job is not None and job.checkpoint_step is not None:
                state = state.with_checkpoint(job.checkpoint_step)
            succeeded = record.outcome == ActionOutcome.SUCCEEDED
            self._states[request.job_id] = state.with_restart_outcome(request.evidence_id, succeeded)


def _furthest_step(job: JobInfo) -> int | None:
    return max((r.step for r in job.ranks.values() if r.step is not None), default=None)
