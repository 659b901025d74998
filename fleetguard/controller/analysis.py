"""Cross-host analysis on the controller's writer thread: hosts gone silent, faults seen fleet-wide, and the
1-minute / 1-hour rollups. Each task runs every few seconds inside one store transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from fleetguard.config import Config
from fleetguard.controller.columns import insert_records
from fleetguard.controller.correlation import FleetCorrelation
from fleetguard.controller.fleet_runtime import FleetAction, FleetRuntime
from fleetguard.controller.hosts import HostState
from fleetguard.controller.ingest import IngestWriter
from fleetguard.controller.maintenance import Maintenance, retention
from fleetguard.controller.rollups import ROLLUP_SECONDS, Rollups
from fleetguard.records.evidence import HostSilentEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id

if TYPE_CHECKING:
    from fleetguard.predict.scoring_service import ScoringService

log = logging.getLogger(__name__)

SILENT_CHECK_SECONDS = 5.0


class SilentHosts:
    """A `host_silent` finding once per silence: when a host has not been heard for longer than expected
    (MegaScale's heartbeat to the driver). The same silence is never reported twice, across restarts too:
    its id is the host and the time it was last heard."""

    def __init__(self, writer: IngestWriter, silent_after_seconds: float) -> None:
        self.writer = writer
        self.silent_after_seconds = silent_after_seconds
        self._reported: set[str] | None = None

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        if self._reported is None:
            rows = con.execute("SELECT finding_id FROM findings WHERE kind = 'host_silent'").fetchall()
            self._reported = {_in_current_scheme(str(r[0])) for r in rows}
        findings = []
        for host in self.writer.host_states():
            if not host.is_silent(now, self.silent_after_seconds):
                continue
            if host_silent_id(host) in self._reported:
                continue
            findings.append(host_silent_finding(host, now, self.silent_after_seconds))
        if findings:
            insert_records(con, findings)
            self._reported.update(f.finding_id for f in findings)


def host_silent_id(host: HostState) -> str:
    """One silence of one host is one finding, however often it is checked: the id names its last sign."""
    return finding_id(FindingKind.HOST_SILENT, host.host, host.last_seen)


def _in_current_scheme(stored: str) -> str:
    """A stored host_silent id as `host_silent_id` writes it. Before the one id scheme it was
    "host_silent:<host>:<ts>" (the same millisecond text): read as the new id, a silence reported before an
    upgrade is not reported again after it."""
    legacy = f"{FindingKind.HOST_SILENT.value}:"
    if not stored.startswith(legacy):
        return stored
    host, _, seen = stored[len(legacy) :].rpartition(":")
    return f"{FindingKind.HOST_SILENT.value}/{host}/{seen}"


def host_silent_finding(host: HostState, now: float, silent_after_seconds: float) -> Finding:
    """The `host_silent` finding for a host silent at `now` (`silent_after_seconds`: the configured floor)."""
    silent_for = now - host.last_seen
    return Finding(
        ts=now,
        finding_id=host_silent_id(host),
        kind=FindingKind.HOST_SILENT,
        severity=Severity.WARNING,
        subject=f"host/{host.host}",
        summary=(
            f"the agent on {host.host} has been silent for {silent_for:.0f} s "
            f"(it ships every {host.interval_seconds:g} s)"
        ),
        host=host.host,
        evidence_json=evidence_json(
            HostSilentEvidence(
                last_seen_ts=host.last_seen,
                last_seq=host.last_seq,
                boot_id=host.boot_id,
                interval_seconds=host.interval_seconds,
                silent_after_seconds=host.silent_after(silent_after_seconds),
            )
        ),
    )


RETENTION_SECONDS = 3600.0
CORRELATION_SECONDS = 15.0
FLEET_RUNTIME_SECONDS = 1.0


def register_analysis(
    writer: IngestWriter,
    maintenance: Maintenance,
    config: Config,
    *,
    incidents: bool = True,
    scoring: bool = True,
) -> list[Callable[[], None]]:
    """Register the controller's periodic analysis; return what to call at shutdown. `incidents=False`: the
    caller runs incidents itself (`fleetguard up`, with its repair executor and incident metrics);
    `scoring=False`: the caller runs the scoring service itself (`up`, which also acts on the job)."""
    ctl = config.controller
    writer.every(SILENT_CHECK_SECONDS, "silent hosts", SilentHosts(writer, ctl.silent_after_seconds))
    rollups = Rollups()
    writer.on_committed.append(lambda batch: rollups.touched(batch.tables))
    maintenance.every(ROLLUP_SECONDS, "rollups", rollups)
    maintenance.every(RETENTION_SECONDS, "retention", retention(config.store.retention_days))
    correlation = FleetCorrelation(ctl.correlation_window_seconds, ctl.correlation_min_hosts)
    maintenance.every(CORRELATION_SECONDS, "fleet correlation", correlation)
    runtime = FleetRuntime(writer.host_states, act=lambda a: _queue_action(writer, a))
    writer.on_committed.append(runtime.feed)
    writer.stats.extra.append(runtime.exposition)
    maintenance.every(FLEET_RUNTIME_SECONDS, "fleet runtime analysis", runtime)
    if scoring and config.predictor.model_dir:
        scorer = fleet_scoring(config)
        if scorer is not None:
            maintenance.every(config.predictor.score_interval_seconds, "live scoring", scorer)
    stops: list[Callable[[], None]] = []
    if config.predictor.model_dir:
        # retraining and the registry's requests (fleetguard/predict/retraining.py): polled, never awaited
        from fleetguard.predict.retraining import POLL_SECONDS, RetrainTask

        retrain = RetrainTask(config.predictor, config.store.path, Path(config.predictor.model_dir))
        maintenance.every(POLL_SECONDS, "retraining", retrain)
        stops.append(retrain.stop)
    if incidents and config.diagnosis.enabled:
        # Incidents and alerts (fleetguard.incidents): the task runs inside the writer's transaction.
        from fleetguard.incidents.controller_task import IncidentTask

        task = IncidentTask(config)
        writer.on_stopping.append(task.pacer.hurry)  # a stop never waits behind a resting round
        task.pacer.wanted = writer.calls_waiting  # nor does a command being queued (nor lane 0 behind it)
        # The repairs the rounds ask for, carried out on a thread of their own, and with [actions.slurm] each
        # drained node's way back (controller.fleet_repairs).
        from fleetguard.controller.fleet_repairs import FleetRepairs

        repairs = FleetRepairs(writer, task, config)
        writer.every(config.diagnosis.interval_seconds, "incidents", repairs.incidents_task)
        repairs.start()
        stops.append(repairs.stop)
        task.start_relay(writer.store)
        stops.append(task.stop_relay)
    return stops


class FleetScoring:
    """The controller scores its fleet: the shared scoring service over its own store, on the maintenance
    thread (its reads never hold the writer); predictions and at-risk findings go into the store, where the
    incident task picks the findings up like any agent's."""

    def __init__(self, service: ScoringService) -> None:
        self.service = service

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        scored = self.service.round(con, now)
        if scored.predictions:
            insert_records(con, [*scored.predictions, *scored.findings])


def fleet_scoring(config: Config) -> FleetScoring | None:
    """The scoring task for `[predictor] model_dir`, or None (with one clear log line) when the model
    cannot score live: the controller keeps ingesting either way."""
    from fleetguard.predict.scoring_service import ScoringService

    try:
        service = ScoringService(
            Path(config.predictor.model_dir),
            budget_k=config.predictor.budget_k,
            average_retrains=config.predictor.average_retrains,
        )
    except (ValueError, OSError) as exc:  # ArtifactError is a ValueError
        log.warning("fleet risk scoring is off: %s", exc)
        return None
    return FleetScoring(service)


def _queue_action(writer: IngestWriter, action: FleetAction) -> None:
    try:
        command = writer.queue_command(action.host, action.kind, action.job_id, action.reason)
    except Exception as exc:  # refused or behind: the finding stands, an operator can act on it
        log.warning("fleet analysis could not queue %s for %s: %s", action.kind, action.host, exc)
        return
    log.warning(
        "fleet analysis: %s of job %s queued for %s (%s)",
        action.kind,
        action.job_id,
        action.host,
        command.command_id,
    )
