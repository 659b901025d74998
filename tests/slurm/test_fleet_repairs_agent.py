"""The repair loop end to end: a real controller on loopback with `[actions.slurm]`, a real one-node Slurm,
and the host's agent side (spool, shipper, command channel) shipping over HTTP. A fatal XID drains the node
with the incident id in the reason; once the incident resolves the controller asks the agent for a
self-check as a command; the agent runs a real one (a simulated host: gloo on CPU), ships the evidence as a
finding and acks; the node resumes and the repair's outcome is in the store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetguard.actions.slurm import SlurmNodes
from fleetguard.config import load_config
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot
from fleetguard.selfcheck.command import selfcheck_runner
from fleetguard.shipping.agent_side import host_runner, runtime_runner
from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import CommandKind
from fleetguard.shipping.shipper import Shipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.spool_buffer import SpoolBuffer
from tests.controller.helpers import Controller, gpu_rows, start_test_controller
from tests.diagnosis.records import xid
from tests.slurm.cluster import NODE, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]


@dataclass
class Agent:
    buffer: SpoolBuffer
    shipper: Shipper
    spool: Spool
    channel: CommandChannel

    def ship(self, rows: list[object]) -> None:
        """One flush: the rows and any acks, sent; the reply's commands reach the channel."""
        self.buffer.add(rows)
        self.buffer.flush()
        while (record := self.shipper.drain.next_record()) is not None:
            assert self.shipper.send(record) == 0.0


@pytest.fixture
def controller(tmp_path: Path, slurm: SlurmCluster) -> Iterator[Controller]:
    running = start_test_controller(
        tmp_path,
        hosts=("node1",),
        extra={
            "diagnosis.interval_seconds": 0.5,
            # Resolved a few seconds after the last sighting (the catalogue keeps XID 79 open for hours).
            "policy.xid": {"79": {"action": "drain", "sticky_seconds": 1}},
            "policy.lifecycle": {"resolve_healthy_seconds": 3, "flap_window_seconds": 0},
            "actions.slurm": {
                "enabled": True,
                "slurm_conf": str(slurm.conf),
                "nodes": {"node1": NODE},
                "timeout_seconds": 15,
                "return_interval_seconds": 0.5,
            },
        },
    )
    try:
        yield running
    finally:
        running.running.stop()
        slurm.scontrol("update", f"NodeName={NODE}", "State=RESUME")


@pytest.fixture
def agent(tmp_path: Path, controller: Controller) -> Iterator[Agent]:
    config = load_config(env={}, overrides={"agent.host": "node1", "simulate.fleet": "1x2"})
    buffers: list[SpoolBuffer] = []
    channel = CommandChannel(
        tmp_path / "commands.jsonl",
        host_runner(
            runtime_runner(RuntimeSlot(), "node1"),
            {CommandKind.SELFCHECK: selfcheck_runner(config)},
            lambda rows: buffers[0].add(rows),
        ),
    )
    spool = Spool(tmp_path / "spool", 1 << 22)
    shipper = Shipper(
        spool, controller.url, controller.tokens["node1"], channel=channel, clock=time.monotonic
    )
    buffer = SpoolBuffer(spool, "node1", 1.0, channel=channel)
    buffers.append(buffer)
    channel.start()
    try:
        yield Agent(buffer, shipper, spool, channel)
    finally:
        channel.stop()
        spool.close()


def _until(agent: Agent, done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        agent.ship(gpu_rows("node1", time.time()))
        if done():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def test_a_fatal_xid_drains_the_node_and_a_selfcheck_from_its_agent_brings_it_back(
    controller: Controller, agent: Agent, slurm: SlurmCluster
) -> None:
    nodes = SlurmNodes(slurm_conf=str(slurm.conf))
    agent.ship([xid(79, time.time())])
    _until(agent, lambda: nodes.state(NODE).out_of_service, 60, "drained")
    incident_id = nodes.state(NODE).incident_id()
    assert incident_id is not None and f"fleetguard {incident_id}:" in nodes.state(NODE).reason

    _until(agent, lambda: not nodes.state(NODE).out_of_service, 240, "resumed after a self-check")
    con = controller.running.store.cursor()
    commands = con.execute("SELECT command_id, kind, outcome, detail FROM host_commands").fetchall()
    assert [(kind, outcome) for _, kind, outcome, _ in commands] == [("selfcheck", "done")]
    assert str(commands[0][3]).startswith("passed: ")
    evidence_sql = "SELECT evidence_json FROM findings WHERE kind = 'selfcheck_passed'"
    # The evidence was shipped before the ack; it is in by now, or within a flush.
    _until(agent, lambda: bool(con.execute(evidence_sql).fetchall()), 30, "the self-check's finding")
    [(evidence,)] = con.execute(evidence_sql).fetchall()
    assert json.loads(evidence)["command_id"] == commands[0][0]
    outcome_sql = (
        "SELECT incident_id, state, selfcheck_command, selfcheck_passed, resumed_at IS NOT NULL "
        "FROM repair_outcomes"
    )
    # Slurm resumes the node first; the repair's end is written after, in a transaction of the writer's.
    _until(agent, lambda: (con.execute(outcome_sql).fetchone() or ("", ""))[1] == "resumed", 30, "recorded")
    row = con.execute(outcome_sql).fetchone()
    assert row == (incident_id, "resumed", commands[0][0], True, True)
