"""Commands to hosts: queued by an operator, carried by ingest replies until acked, run once by the agent."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

import duckdb

from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import CommandOutcome, HostCommand
from fleetguard.shipping.shipper import Shipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.spool_buffer import SpoolBuffer
from tests.controller.helpers import Controller, batch, gpu_rows


class Recorder:
    def __init__(self) -> None:
        self.runs: list[HostCommand] = []
        self.ran = threading.Event()  # set by the channel's worker thread once a command has run

    def __call__(self, command: HostCommand) -> tuple[CommandOutcome, str]:
        self.runs.append(command)
        self.ran.set()
        return CommandOutcome.DONE, "cordoned"


def _queue(controller: Controller, host: str) -> str:
    reply = controller.post(
        "/v1/commands",
        b'{"host": "%s", "kind": "cordon", "reason": "test"}' % host.encode(),
        controller.tokens["operator"],
        encoding="identity",
    )
    assert reply.status == 201, reply.doc
    return str(reply.doc["command"]["id"])


def _ship_round(buffer: SpoolBuffer, shipper: Shipper, spool: Spool) -> None:
    buffer.add(gpu_rows(buffer.host, time.time()))
    buffer.flush()
    while (record := shipper.drain.next_record()) is not None:
        assert shipper.send(record) == 0.0
        assert spool.read(record) is None  # committed and gone


def test_a_command_survives_a_lost_reply_and_runs_once(controller: Controller, tmp_path: Path) -> None:
    command_id = _queue(controller, "node-a")
    # A batch whose reply is lost on the way back: the command rode on it, the agent never saw it.
    lost = controller.ship(batch("node-a", 1, boot_id="earlier-boot"))
    assert [c["id"] for c in lost.doc["commands"]] == [command_id]

    recorder = Recorder()
    channel = CommandChannel(tmp_path / "commands.jsonl", recorder)
    channel.start()
    spool = Spool(tmp_path / "spool", 1 << 20)
    shipper = Shipper(
        spool, controller.url, controller.tokens["node-a"], channel=channel, clock=time.monotonic
    )
    buffer = SpoolBuffer(spool, "node-a", 1.0, channel=channel)
    try:
        _ship_round(buffer, shipper, spool)  # the reply carries the command again: it runs
        recorder.ran.wait(30)  # the channel runs it on its worker thread
        _ship_round(buffer, shipper, spool)  # maybe delivered again before the ack: not run again
        for _ in range(3):
            time.sleep(0.05)
            _ship_round(buffer, shipper, spool)  # the ack rides on one of these batches
    finally:
        channel.stop()
    assert [c.command_id for c in recorder.runs] == [command_id]
    listed = controller.get("/v1/commands?host=node-a").doc["commands"]
    assert [(c["command_id"], c["outcome"], c["detail"]) for c in listed] == [
        (command_id, "done", "cordoned")
    ]
    assert listed[0]["deliveries"] >= 2
    # Acked: the next reply carries nothing.
    assert controller.ship(batch("node-a", 99, boot_id="later")).doc["commands"] == []
    path = controller.config_overrides["store.path"]
    controller.running.stop()
    con = duckdb.connect(path, read_only=True)
    try:
        row = con.execute("SELECT outcome, acked_ts IS NOT NULL FROM host_commands").fetchall()
    finally:
        con.close()
    assert row == [("done", True)]


def test_deliveries_count_the_answers_that_carried_the_command(controller: Controller) -> None:
    command_id = _queue(controller, "node-a")
    carried = 0
    for reply in (
        controller.ship(batch("node-a", 1)),
        controller.ship(batch("node-a", 1)),  # a resend: answered "duplicate", with the command again
        controller.ship(batch("node-a", 2)),
    ):
        carried += [c["id"] for c in reply.doc["commands"]] == [command_id]
    assert carried == 3

    def deliveries() -> int:
        controller.ship(batch("node-b", int(time.monotonic() * 1000)))  # a commit that records them
        (row,) = controller.get("/v1/commands?host=node-a").doc["commands"]
        return int(row["deliveries"])

    deadline = time.monotonic() + 30
    while deliveries() != carried:
        assert time.monotonic() < deadline, f"deliveries {deliveries()}, answers that carried it {carried}"
        time.sleep(0.05)  # the commit that records them is the writer's, after the answers
    for _ in range(3):  # other hosts' commits add nothing
        assert deliveries() == carried


def test_commands_need_an_operator_token(controller: Controller) -> None:
    body = b'{"host": "node-a", "kind": "cordon"}'
    assert controller.post("/v1/commands", body, None, encoding="identity").status == 401
    assert (
        controller.post("/v1/commands", body, controller.tokens["node-a"], encoding="identity").status == 403
    )
    bad = b'{"host": "node-a", "kind": "reboot-everything"}'
    assert (
        controller.post("/v1/commands", bad, controller.tokens["operator"], encoding="identity").status == 400
    )


def test_a_host_only_acknowledges_its_own_commands(controller: Controller) -> None:
    command_id = _queue(controller, "node-a")
    forged = batch("node-b", 1)
    doc = forged.to_json()
    doc["acks"] = [{"id": command_id, "outcome": "done", "detail": ""}]
    assert (
        controller.post(
            "/v1/ingest", gzip.compress(json.dumps(doc).encode()), controller.tokens["node-b"]
        ).status
        == 200
    )
    assert [c["id"] for c in controller.ship(batch("node-a", 1)).doc["commands"]] == [command_id]


def test_acks_for_unknown_ids_are_counted_as_such_and_acknowledge_nothing(controller: Controller) -> None:
    from fleetguard.shipping.commands import CommandAck
    from tests.controller.helpers import metric_value

    mine = _queue(controller, "node-a")
    theirs = _queue(controller, "node-b")
    done = CommandOutcome.DONE
    stray = batch("node-a", 1)
    # an id nobody queued, and node-b's command acked by node-a: neither is node-a's
    stray.acks = [CommandAck("no-such-command", done, ""), CommandAck(theirs, done, "")]
    assert controller.ship(stray).status == 200
    first = batch("node-a", 2)
    first.acks = [CommandAck(mine, done, "ok")]
    assert controller.ship(first).status == 200
    again = batch("node-a", 3)  # the command was delivered again before the first ack was committed
    again.acks = [CommandAck(mine, done, "ok")]
    assert controller.ship(again).status == 200
    metrics = controller.metrics()
    stage = 'fleetguard_controller_commands_total{stage="%s"}'
    assert metric_value(metrics, stage % "acked") == 1
    assert metric_value(metrics, stage % "acked_again") == 1
    assert metric_value(metrics, stage % "ack_unknown") == 2
    listed = {c["command_id"]: c for c in controller.get("/v1/commands").doc["commands"]}
    assert listed[theirs]["acked_ts"] is None  # still pending for node-b
    assert [c["id"] for c in controller.ship(batch("node-b", 1)).doc["commands"]] == [theirs]
    assert listed[mine]["outcome"] == "done"


def test_no_command_is_queued_for_the_name_fleet_wide_incidents_are_filed_under(
    controller: Controller,
) -> None:
    # No agent may ship as "fleet" (refused at token issue, agent start and ingest): a command for it would
    # stay pending for ever, counted against the hosts that may have unacknowledged commands.
    body = b'{"host": "fleet", "kind": "cordon", "reason": "test"}'
    reply = controller.post("/v1/commands", body, controller.tokens["operator"], encoding="identity")
    assert reply.status == 409
    assert "reserved" in str(reply.doc)
    assert controller.get("/v1/commands?host=fleet").doc["commands"] == []
