"""The way back to service as a running task of `fleetguard up`: every `RETURN_INTERVAL_SECONDS` the local
node is reconciled (`NodeReturner`): a node fleetguard drained resumes once its incident resolved, nothing
else holds the host and a self-check passes. Each new step is logged once, and recorded in `repair_outcomes`
as the controller's loop records its fleet's (fleetguard.actions.repair_record)."""

from __future__ import annotations

import logging
import threading
import time

import duckdb

from fleetguard.actions.repair_record import Transaction, note_drains, record_step
from fleetguard.actions.slurm_return import (
    NodeReturner,
    ReturnResult,
    ReturnStep,
    SelfcheckVerdict,
    ThrottledSelfcheck,
)
from fleetguard.agent.agent import Agent
from fleetguard.agent.extension import Extension
from fleetguard.config import Config
from fleetguard.selfcheck.run import selfcheck_host
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from fleetguard.store.repair_tables import open_repairs

log = logging.getLogger(__name__)

RETURN_INTERVAL_SECONDS = 30.0


def slurm_return_extension(config: Config, interval_seconds: float = RETURN_INTERVAL_SECONDS) -> Extension:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def selfcheck() -> SelfcheckVerdict:
        policy = load_policy(config.diagnosis.policy_file or None, config.policy.tables)
        report = selfcheck_host(config, policy)
        return SelfcheckVerdict(report.passed, report.first_failure())

    def start(_agent: Agent, store: Store) -> None:
        # a failing node is not re-tested on every 30 s pass: its GPU tests would keep the host busy
        returner = NodeReturner(config.actions.slurm, ThrottledSelfcheck(selfcheck, time.time))
        window = load_policy(
            config.diagnosis.policy_file or None, config.policy.tables
        ).escalation.window_seconds
        keep = config.store.retention_days * 86400.0

        def one_pass(cursor: duckdb.DuckDBPyConnection) -> ReturnResult:
            now = time.time()
            with Transaction(cursor):
                note_drains(cursor, config.actions.slurm, window, keep, now)
            repairs = [r for r in open_repairs(cursor) if r.host == config.host]
            result = returner.reconcile(cursor, config.host)
            if repairs:
                with Transaction(cursor):
                    record_step(cursor, repairs, result, None, time.time())
            return result

        def loop() -> None:
            cursor = store.cursor()
            said: tuple[ReturnStep, str] | None = None
            while not stop.wait(interval_seconds):
                try:
                    result = one_pass(cursor)
                except Exception as exc:  # one bad pass must not end the loop
                    log.warning("slurm: returning %s to service failed: %s", config.host, exc)
                    continue
                if result.step is not ReturnStep.IN_SERVICE and (result.step, result.detail) != said:
                    log.warning("slurm node %s: %s: %s", result.node, result.step.value, result.detail)
                said = (result.step, result.detail)

        thread = threading.Thread(target=loop, name="fleetguard-slurm-return", daemon=True)
        threads.append(thread)
        thread.start()

    def stop_all() -> None:
        stop.set()
        for thread in threads:
            # A self-check in progress finishes within its own deadline (its children are killed there).
            thread.join(timeout=config.actions.slurm.timeout_seconds * 4 + 180)

    return Extension("slurm return", start, stop_all)
