"""The repair loop for the fleet, on the controller: the repairs the fleet's incidents ask for (Slurm drains
with `[actions.slurm] enabled`, the configured `diagnosis.*_command`s, or recorded skipped), and with Slurm
each drained node's way back, with the self-check asked of the host's own agent as a command and what
happened recorded in `repair_outcomes` (fleetguard.store.repair_tables).

Wiring (fleetguard.controller.analysis):

    repairs = FleetRepairs(writer, task, config)
    writer.every(interval, "incidents", repairs.incidents_task)  # the round, then its repairs queued
    repairs.start()  # the repair thread; repairs.stop() at the end

Repairs go through the incident engine's action ledger and breaker like every repair: the round requests
them, this thread carries them out (`scontrol` or a command: never on the writer thread, they wait on
slurmctld or a host) and ends each in the ledger through the writer, so none stays "requested" forever and
one that never ran (skipped) is not counted by the breaker. The way back is `NodeReturner`'s: a node
returns only when the incident named in its drain reason resolved, nothing else holds the host, and a
self-check newer than that passed; a node drained with a reason fleetguard did not write is never resumed.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field, replace

import duckdb

from diagnosis.incident import ActionEntry, ActionOutcome
from diagnosis.model import IncidentKey
from fleetguard.actions.repair_record import Transaction, note_drains, record_step
from fleetguard.actions.slurm import SlurmNodes
from fleetguard.actions.slurm_return import (
    SELFCHECK_RECHECK_SECONDS,
    NodeReturner,
    ReturnResult,
    ReturnStep,
    SelfcheckVerdict,
)
from fleetguard.clock import Clock, SystemClock
from fleetguard.config import Config
from fleetguard.controller.ingest import IngestWriter
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.shipping.commands import CommandKind, CommandOutcome
from fleetguard.store.incident_tables import epoch_sql, ts_sql
from fleetguard.store.repair_tables import OpenRepair, open_repairs

log = logging.getLogger(__name__)

RECHECK_SECONDS = (
    SELFCHECK_RECHECK_SECONDS  # a failed self-check is asked again after this; a pass as old is stale
)
STALE_SELFCHECK_SECONDS = 600.0  # delivered and not answered this long: something is wrong on the host
MAX_QUEUED_REPAIRS = 1024  # requested repairs waiting for the repair thread (the breaker bounds them anyway)


def _no_local_selfcheck() -> SelfcheckVerdict:
    # The controller never checks a host itself: its verdicts come from the host's agent (FleetSelfchecks).
    return SelfcheckVerdict(False, "no self-check runs on the controller")


@dataclass
class FleetSelfchecks:
    """Self-check verdicts from the hosts' agents: asked as a SELFCHECK command, read from its ack in
    `host_commands` (the agent ships the evidence as findings beside it)."""

    writer: IngestWriter
    asked: dict[str, str]  # host -> the self-check command its open repairs wait on
    waiting: dict[str, str] = field(default_factory=dict)  # host -> what its unanswered command is doing

    def verdict(
        self, con: duckdb.DuckDBPyConnection, host: str, incident_id: str, now: float
    ) -> SelfcheckVerdict | None:
        """The verdict of a check of `host` asked after its incidents resolved, or None while none is in
        (a command is queued when none is asked, or the last one is too old to go by)."""
        since = con.execute(
            f"SELECT max({epoch_sql('resolved_at')}) FROM incidents WHERE host = ?", [host]
        ).fetchone()
        row = con.execute(
            f"SELECT command_id, {epoch_sql('acked_ts')}, outcome, detail, {epoch_sql('created_ts')}, "
            "deliveries FROM host_commands "
            f"WHERE host = ? AND kind = ? AND created_ts >= {ts_sql()} ORDER BY created_ts DESC LIMIT 1",
            [host, CommandKind.SELFCHECK.value, float(since[0] or 0.0) if since else 0.0],
        ).fetchone()
        if row is None or (row[1] is not None and now - float(row[1]) > RECHECK_SECONDS):
            command = self.writer.queue_command(
                host, CommandKind.SELFCHECK, None, f"fleetguard {incident_id}: self-check before resume"
            )
            self.asked[host] = command.command_id
            self.waiting[host] = waiting_detail(command.command_id, 0.0, 0)
            return None
        command_id, acked, outcome, detail, created, deliveries = row
        self.asked[host] = str(command_id)
        if acked is None:
            # Queued or running: it rides on the host's ingest replies until acked. Say which, for whoever
            # wonders why the node is still out.
            self.waiting[host] = waiting_detail(str(command_id), now - float(created), int(deliveries or 0))
            return None
        if outcome == CommandOutcome.DONE.value:
            return SelfcheckVerdict(True)
        return SelfcheckVerdict(False, str(detail or "") or f"the agent answered {outcome}")


def waiting_detail(command_id: str, age: float, deliveries: int) -> str:
    text = f"self-check {command_id[:12]} asked {age:.0f} s ago"
    if not deliveries:
        return f"{text}, not delivered yet: the host has not shipped since (is its agent running?)"
    if age > STALE_SELFCHECK_SECONDS:
        # A self-check runs within its deadline (120 s by default); an agent from before this command kind
        # skips it as unknown and never answers.
        return (
            f"{text}, delivered {deliveries} times, no answer: is the host's agent older than the controller?"
        )
    return f"{text}, delivered {deliveries} times, running"


class FleetRepairs:
    def __init__(
        self,
        writer: IngestWriter,
        task: IncidentTask,
        config: Config,
        clock: Clock | None = None,
        nodes: SlurmNodes | None = None,
        return_interval_seconds: float | None = None,
    ) -> None:
        self.writer = writer
        self.task = task
        self.config = config
        self.slurm = config.actions.slurm
        self.clock = clock or SystemClock()
        self.executor = RepairExecutor(config.diagnosis, slurm=self.slurm)
        self.returner = NodeReturner(self.slurm, _no_local_selfcheck, nodes)
        self.checks = FleetSelfchecks(writer, {})
        self.window_seconds = task.policy.escalation.window_seconds
        self.return_interval_seconds = return_interval_seconds or self.slurm.return_interval_seconds
        self._requested: collections.deque[tuple[ActionEntry, IncidentKey, str]] = collections.deque()
        self._queued_ids: set[str] = set()  # in the queue or being carried out (each once)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said: dict[str, tuple[ReturnStep, str]] = {}
        self.dropped = 0  # requested repairs not queued (the queue was full): they stay requested

    # ---- on the writer thread -------------------------------------------------------------------------

    def incidents_task(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        """The incident round, then the repairs it requested handed to the repair thread."""
        self.task(con, now)
        # the round's requests, and after a restart those requested before it and never carried out
        self._queue([(p.entry, p.key, p.summary) for p in self.task.pending_repairs])

    def _queue(self, entries: list[tuple[ActionEntry, IncidentKey, str]]) -> None:
        with self._lock:
            for entry, key, summary in entries:
                if entry.outcome is not ActionOutcome.REQUESTED or entry.finished_at is not None:
                    continue
                if entry.action_id in self._queued_ids:
                    continue
                if len(self._requested) >= MAX_QUEUED_REPAIRS:
                    self.dropped += 1
                    continue
                self._requested.append((entry, key, summary))
                self._queued_ids.add(entry.action_id)
        if self._requested:
            self._wake.set()

    # ---- on the repair thread -------------------------------------------------------------------------

    def carry_out_requested(self) -> int:
        """Carry out the queued repairs (Slurm, a command, or skipped), each ended in the incident ledger
        through the writer."""
        done = 0
        while not self._stop.is_set():
            with self._lock:
                if not self._requested:
                    return done
                entry, key, summary = self._requested.popleft()
            try:
                outcome, detail = self.executor.carry_out(entry, key, summary)
            finally:
                with self._lock:
                    self._queued_ids.discard(entry.action_id)

            def finish(
                entry: ActionEntry = entry, outcome: ActionOutcome = outcome, detail: str = detail
            ) -> None:
                with self.writer.store.transaction():
                    self.task.action_finished(entry.action_id, outcome, detail, self.clock.time())

            self.writer.call(finish)
            log.warning(
                "repair %s for %s on %s: %s: %s",
                entry.action.value,
                entry.incident_id,
                key.host,
                outcome.value,
                detail,
            )
            done += 1
        return done

    def reconcile(self, con: duckdb.DuckDBPyConnection) -> list[ReturnResult]:
        """One pass: note new drains, decide which returned repairs held, then walk each drained host's
        node toward service. Returns what each host's pass found."""
        now = self.clock.time()
        keep = self.config.store.retention_days * 86400.0
        with Transaction(con):
            for repair_id, incident_id in note_drains(con, self.slurm, self.window_seconds, keep, now):
                log.warning("repair %s did not hold: the fault came back (%s)", repair_id, incident_id)
        by_host: dict[str, list[OpenRepair]] = {}
        for repair in open_repairs(con):
            by_host.setdefault(repair.host, []).append(repair)
        results = []
        for host, repairs in by_host.items():
            if self._stop.is_set():
                break
            if not self.slurm.resume:
                continue  # drains recorded; the way back is the operators'

            def verdict(incident_id: str, host: str = host) -> SelfcheckVerdict | None:
                return self.checks.verdict(con, host, incident_id, now)

            try:
                result = self.returner.reconcile(con, host, verdict)
                if result.step is ReturnStep.SELFCHECK_PENDING and host in self.checks.waiting:
                    result = replace(result, detail=self.checks.waiting[host])
                with Transaction(con):
                    record_step(con, repairs, result, self.checks.asked.get(host), now)
            except Exception as exc:  # one host's failure (a refused command, a store error) spares the rest
                log.warning("slurm: returning %s to service failed: %s", host, exc)
                continue
            self._say(host, result)
            results.append(result)
        return results

    def _say(self, host: str, result: ReturnResult) -> None:
        said = (result.step, result.detail)
        if self._said.get(host) != said:
            log.warning("slurm node %s (%s): %s: %s", result.node, host, result.step.value, result.detail)
        self._said[host] = said
        if result.step in (ReturnStep.RESUMED, ReturnStep.IN_SERVICE):
            self._said.pop(host, None)
            self.checks.asked.pop(host, None)
            self.checks.waiting.pop(host, None)

    # ---- the thread -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetguard-fleet-repairs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A pass ends within a few scontrol timeouts or one command's, and one writer call.
            longest = max(self.slurm.timeout_seconds * 4, self.config.diagnosis.command_timeout_seconds)
            self._thread.join(timeout=longest + 40)

    def _run(self) -> None:
        con = self.writer.store.cursor()
        next_return = self.clock.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    self.carry_out_requested()
                    if self.slurm.enabled and self.clock.monotonic() >= next_return:
                        next_return = self.clock.monotonic() + self.return_interval_seconds
                        self.reconcile(con)
                except Exception as exc:  # one bad pass must not end the loop
                    log.warning("slurm repair pass failed: %s", exc)
                self._wake.wait(min(self.return_interval_seconds, 5.0))
                self._wake.clear()
        finally:
            con.close()
