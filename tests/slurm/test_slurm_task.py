"""The return task as `fleetguard up` runs it: on a real store and a real Slurm, a node fleetguard drained
for an incident that has resolved comes back after a real self-check (a simulated host: gloo on CPU)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from diagnosis.rules import Signals
from fleetguard.actions.slurm import SlurmNodes
from fleetguard.config import load_config
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.selfcheck.return_task import slurm_return_extension
from fleetguard.settings.actions import SlurmConfig
from fleetguard.settings.diagnosis import DiagnosisConfig
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import xid
from tests.slurm.cluster import NODE, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_the_task_resumes_the_node_after_its_incident_resolved_and_the_selfcheck_passed(
    store: Store, slurm: SlurmCluster
) -> None:
    slurm_table: dict[str, Any] = {"enabled": True, "slurm_conf": str(slurm.conf), "nodes": {"node1": NODE}}
    config = load_config(
        env={},
        overrides={"agent.host": "node1", "simulate.fleet": "1x2", "actions.slurm": slurm_table},
    )
    executor = RepairExecutor(DiagnosisConfig(), slurm=SlurmConfig(**{**slurm_table, "timeout_seconds": 15}))
    policy = load_policy(None, {"xid": {"79": {"action": "drain"}}})
    t0 = time.time() - 120  # the task records outcomes on the wall clock: the drain is recent
    service = IncidentService.open(store.cursor(), policy, t0, executor=executor)
    service.round(Signals(events=[xid(79, t0)]), t0 + 1)
    nodes = SlurmNodes(slurm_conf=str(slurm.conf))
    incident = nodes.state(NODE).incident_id()
    assert incident is not None
    assert service.resolve(incident, t0 + 60)
    task = slurm_return_extension(config, interval_seconds=0.5)
    task.start(None, store)  # type: ignore[arg-type]  # the task reads only the store
    try:
        deadline = time.monotonic() + 200
        while nodes.state(NODE).out_of_service and time.monotonic() < deadline:
            time.sleep(0.5)  # polling a real slurmctld's node state: it offers no event to wait on
        assert not nodes.state(NODE).out_of_service
        task.stop()
        # The way back is on record, as the controller records its fleet's.
        rows = store.cursor().execute(
            "SELECT incident_id, node, state, selfcheck_passed FROM repair_outcomes"
        )
        assert rows.fetchall() == [(incident, NODE, "resumed", True)]
    finally:
        task.stop()
        slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")
