"""`fleetguard up`: the embedded default: agent, controller (one store), training runtime, live scoring,
incidents and dashboard in one process."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from diagnosis.drain_marks import DrainMarks
from fleetguard import stop_signals
from fleetguard.agent.agent import Agent
from fleetguard.agent.daemon import run_daemon
from fleetguard.agent.daemon_deps import DaemonDeps
from fleetguard.agent.extension import Extension
from fleetguard.agent.gpu_jobs import GpuJobs, act_on_gpu_findings
from fleetguard.agent.sources import NoSources, Sources, build_sources
from fleetguard.config import Config
from fleetguard.httpserve import bound_where
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot
from fleetguard.runtime.extension import runtime_extension
from fleetguard.status import StatusPrinter
from fleetguard.store import Store

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)


def run_embedded(
    config: Config,
    *,
    duration_seconds: float | None = None,
    runtime: bool = True,
    predict: bool = True,
    out: TextIO = sys.stdout,
    deps: DaemonDeps | None = None,
) -> int:
    """Run until SIGTERM; return the process exit code (2 when there is nothing to sample). `deps`: what the
    daemon takes from the world (fleetguard/agent/daemon_deps.py), production's by default."""
    deps = deps or DaemonDeps.production()
    try:
        sources = build_sources(config, require_gpu=True, clock=deps.clock)
    except NoSources as exc:
        out.write(f"fleetguard up: {exc}\n")
        return 2
    extensions: list[Extension] = []
    risk = _RiskSummary()
    runtime_slot = RuntimeSlot()
    if runtime and config.runtime.enabled:
        extensions.append(runtime_extension(config, runtime_slot))
    if predict and (config.predictor.model_dir or sources.simulated):
        extensions.append(_scoring_extension(config, sources, risk, runtime_slot, out))
    describe = risk.describe
    if config.diagnosis.enabled:
        from fleetguard.incidents.extension import IncidentSummary, incidents_extension

        incidents = IncidentSummary()
        extensions.append(incidents_extension(config, incidents))

        def describe() -> str:
            return f"{risk.describe()} | {incidents.describe()}"

    if config.actions.slurm.enabled and config.actions.slurm.resume:
        from fleetguard.selfcheck.return_task import slurm_return_extension

        extensions.append(slurm_return_extension(config))
    from dashboard.embedded import DashboardPlace, dashboard_extension  # no Dash import: only when it starts

    dashboard = DashboardPlace()
    if config.dashboard.enabled:
        extensions.append(dashboard_extension(config, dashboard))
    status = StatusPrinter(out, xid_names=_xid_names(), extra=describe)

    def banner(port: int) -> None:
        what = f"simulated fleet {config.simulate.fleet}" if sources.simulated else f"host {config.host}"
        interval = config.agent.sample_interval_seconds
        store_path = Path(config.store.path).resolve()
        metrics = bound_where(config.agent.metrics_address, port, "/metrics")
        out.write(
            f"fleetguard up: sampling {what} ({sources.gpus} GPUs) every {interval:g} s\n"
            f"  metrics   {metrics}  (curl -s localhost:{port}/metrics | grep xid)\n"
            f"  store     {store_path}  (fleetguard export --parquet DIR, also while up runs)\n"
        )
        endpoint = runtime_slot.service.endpoint if runtime_slot.service is not None else None
        if endpoint:  # the port bound (runtime.port 0 is any free one)
            out.write(
                f"  training  ranks send heartbeats to {endpoint} "
                "(see README: three lines in your training loop)\n"
            )
        if dashboard.url is not None:
            out.write(f"  dashboard {dashboard.url}\n")
        if dashboard.off is not None:
            out.write(f"  note      dashboard is off: {dashboard.off}\n")
        if sink.api_server is not None:
            api = bound_where(sink.api_server.address, sink.api_server.port, "/v1/fleet")
            out.write(f"  read API  {api}  (fleetguard status --controller {sink.api_url})\n")
        for note in sources.unavailable:
            out.write(f"  note      {note}\n")
        out.write("  stop with Ctrl-C (everything buffered is flushed first)\n")
        out.flush()

    if stop_signals.pending():  # Ctrl-C while importing: nothing opened yet, nothing to flush
        out.write("fleetguard up: stopped before it started\n")
        return 0
    # One process, one DuckDB: the agent's rows go through the controller's ingest (checks, ledger, writer
    # lanes, rollups, fleet correlation), with no HTTP; its commands run through the training runtime.
    from fleetguard.controller.inprocess import InProcessController
    from fleetguard.shipping.agent_side import runtime_runner

    sink = InProcessController(
        config,
        deps.clock,
        runtime_runner(runtime_slot, config.host),
        incidents=False,  # the incidents extension above (repairs, metrics, status line)
        serve_api=True,  # the controller's read API: `fleetguard status` and friends ask it
    )
    run_daemon(
        config,
        sources.collectors,
        sources.folder,
        extensions=extensions,
        on_round=status,
        on_ready=banner,
        duration_seconds=duration_seconds,
        out=out,
        sink=sink,
        deps=deps,
    )
    return 0


def _xid_names() -> dict[int, str]:
    try:
        from collectors.xid_catalog import load_xid_catalog

        return {entry.xid: entry.name for entry in load_xid_catalog()}
    except Exception as exc:  # the status line is a convenience: never fail `up` over it
        log.debug("no XID catalog for the status line: %s", exc)
        return {}


class _RiskSummary:
    def __init__(self) -> None:
        self.text = ""

    def describe(self) -> str:
        return self.text or "risk: no model"


def _scoring_extension(
    config: Config, sources: Sources, risk: _RiskSummary, runtime_slot: RuntimeSlot, out: TextIO
) -> Extension:
    stop_event = threading.Event()
    abandoned = threading.Event()  # stopped while the demo model was still training
    gpu_jobs = GpuJobs(sources.collectors)
    threads: list[threading.Thread] = []
    cursors: list[duckdb.DuckDBPyConnection] = []

    def start(agent: Agent, store: Store) -> None:
        def loop() -> None:
            from fleetguard.predict.demo_child import TrainingAbandoned, train_in_child
            from fleetguard.runtime.service import RuntimeService

            try:
                from fleetguard.predict.scoring_service import ScoringRound, ScoringService

                model_dir = Path(config.predictor.model_dir) if config.predictor.model_dir else None
                if model_dir is None:
                    # In a child: a stop while it trains abandons it at once (predict/demo_child.py).
                    demo_dir = Path(config.store.path).parent / "demo-model"
                    model_dir = train_in_child(demo_dir, config.simulate.seed, stop_event)
                service = ScoringService(
                    model_dir,
                    budget_k=config.predictor.budget_k,
                    average_retrains=config.predictor.average_retrains,
                )
            except TrainingAbandoned:
                abandoned.set()
                return
            except Exception as exc:
                log.warning("live risk scoring is off: %s", exc)
                risk.text = "risk: off (see log)"
                return
            risk.text = "risk: waiting for data"
            marks = DrainMarks()
            # Reads only: writes stay on the agent thread, which flushes every flush interval, so scoring sees
            # data at most that old.
            cursor = store.cursor()
            cursors.append(cursor)
            while not stop_event.is_set():
                try:
                    scored = service.round(cursor, agent.clock.time())
                except Exception as exc:
                    if stop_event.is_set():
                        break  # interrupted by stop()
                    log.warning("scoring failed: %s", exc)
                    scored = ScoringRound([], [], [])
                predictions = scored.predictions
                if stop_event.is_set():
                    break  # scored after the final flush began: nothing may be submitted now
                if predictions:
                    agent.metrics.set_predictions(predictions)
                    # the job using an at-risk GPU is named, and asked to checkpoint by the runtime
                    running = runtime_slot.service
                    runtime = running if isinstance(running, RuntimeService) else None
                    findings = act_on_gpu_findings(scored.findings, gpu_jobs, runtime)
                    # ... and the GPU is drained only once nothing runs on it (diagnosis/drain_marks.py)
                    risk_of = {p.device_id: p.risk for p in scored.picked}
                    for finding in findings:
                        marks.mark(finding, risk_of.get(finding.gpu_uuid or "", 0.0), service.horizon_seconds)
                    if len(marks):
                        findings += marks.due(gpu_jobs.usages(), agent.clock.time())
                    agent.submit([*predictions, *findings])
                    risk.text = service.describe()
                # Until the first flush brings data, look again after the next flush rather than a whole
                # scoring interval later (a minute by default): risk shows up in the demo within seconds.
                interval = config.predictor.score_interval_seconds
                if not predictions:
                    interval = min(interval, config.agent.flush_interval_seconds)
                agent.clock.wait(stop_event, interval)

        thread = threading.Thread(target=loop, name="fleetguard-scoring", daemon=True)
        thread.start()
        threads.append(thread)

    def stop() -> None:
        stop_event.set()
        for cursor in cursors:
            cursor.interrupt()  # a query in progress ends now rather than after the store is closed
        for thread in threads:
            # A demo model still training is abandoned (its child killed) within a poll; a scoring round in
            # progress ends at the interrupt above. A thread still inside DuckDB when the interpreter exits
            # aborts the process, so it is waited for, with a bound.
            thread.join(timeout=SCORING_STOP_SECONDS)
            if thread.is_alive():
                log.warning("live scoring did not stop within %.0f s", SCORING_STOP_SECONDS)
        if abandoned.is_set():
            out.write("fleetguard up: stopped while the demo model was still training; abandoned it\n")
            out.flush()

    return Extension("live scoring", start, stop)


SCORING_STOP_SECONDS = 30.0
