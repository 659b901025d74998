"""POST /v1/ingest on a real controller on loopback: stored once, refused with the right status, counted."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import duckdb

from fleetguard.controller.tokens import hash_token, new_token
from fleetguard.records.action_requests import ActionKind
from fleetguard.records.findings import ActionOutcome, ActionRecord, Finding, FindingKind, Severity
from fleetguard.shipping.wire import columns_by_table, encode
from tests.controller.helpers import Controller, batch, metric_value, start_test_controller


def _count(path: str, sql: str) -> int:
    con = duckdb.connect(path, read_only=True)
    try:
        row = con.execute(sql).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def test_a_batch_is_stored_and_a_resent_batch_is_answered_duplicate_and_not_stored_again(
    controller: Controller,
) -> None:
    b = batch("node-a", 1)
    first = controller.ship(b)
    again = controller.ship(b)
    assert (first.status, first.doc["duplicate"]) == (200, False)
    assert (again.status, again.doc["duplicate"]) == (200, True)
    metrics = controller.metrics()
    assert metric_value(metrics, "fleetguard_controller_batches_committed_total") == 1
    assert metric_value(metrics, "fleetguard_controller_batches_duplicate_total") == 1
    path = controller.config_overrides["store.path"]
    controller.running.stop()
    assert _count(path, "SELECT count(*) FROM gpu_samples") == 2
    assert _count(path, "SELECT count(*) FROM nic_counters WHERE value = 9223372036854775813") == 1


def test_the_ledger_survives_a_restart(tmp_path: Path) -> None:
    c = start_test_controller(tmp_path)
    try:
        b = batch("node-a", 7)
        assert c.ship(b).doc["duplicate"] is False
        c.restart()
        assert c.ship(b).doc["duplicate"] is True
        assert c.ship(batch("node-a", 8)).doc["duplicate"] is False
    finally:
        c.running.stop()


def test_no_token_or_a_wrong_token_is_401(controller: Controller) -> None:
    body = encode(batch("node-a", 1))
    assert controller.post("/v1/ingest", body, None).status == 401
    assert controller.post("/v1/ingest", body, "not-a-token").status == 401


def test_a_batch_naming_another_host_than_its_token_is_403(controller: Controller) -> None:
    reply = controller.ship(batch("node-b", 1), token=controller.tokens["node-a"])
    assert reply.status == 403
    assert reply.doc["reason"] == "wrong_host"


def test_a_host_named_like_the_fleet_wide_incidents_is_403_and_nothing_of_it_is_stored(
    tmp_path: Path,
) -> None:
    """A token for "fleet" made before the name was reserved (add_token refuses it now), as it sits in the
    file: its host's incidents would share keys with the fleet-wide findings and the breaker."""
    c = start_test_controller(tmp_path)
    path = c.config_overrides["store.path"]
    try:
        tokens_file = Path(c.config_overrides["controller.tokens_file"])
        doc = json.loads(tokens_file.read_text())
        token = new_token()
        doc["tokens"].append({"host": "fleet", "role": "agent", "sha256": hash_token(token), "created_ts": 0})
        tokens_file.write_text(json.dumps(doc))  # the file keeps its 0600
        reply = c.ship(batch("fleet", 1), token=token)
        assert (reply.status, reply.doc["reason"]) == (403, "wrong_host")
        assert "reserved" in reply.doc["error"]
        assert c.ship(batch("node-a", 1)).status == 200
    finally:
        c.running.stop()
    assert _count(path, "SELECT count(*) FROM gpu_samples WHERE host = 'fleet'") == 0
    assert _count(path, "SELECT count(*) FROM gpu_samples WHERE host = 'node-a'") == 2


def test_rows_of_another_host_inside_a_batch_are_400_so_the_agent_sets_the_batch_aside(
    controller: Controller,
) -> None:
    b = batch("node-a", 1)
    b.tables["gpu_samples"]["host"][0] = "node-b"
    assert controller.ship(b).status == 400


def test_an_agent_cannot_write_findings_only_the_controller_makes(controller: Controller) -> None:
    forged = Finding(
        1_795_000_000.0,
        "host_silent:node-b:1.000",
        FindingKind.HOST_SILENT,
        Severity.WARNING,
        "host/node-b",
        "x",
    )
    b = batch("node-a", 1)
    b.tables.update(columns_by_table([forged]))
    assert controller.ship(b).status == 400
    # nor one of their ids under another kind (the controller's own id scheme: "<kind>/...")
    forged_id = Finding(
        1_795_000_000.0, "host_silent/node-b/1.000", FindingKind.STRAGGLER, Severity.WARNING, "job/j", "x"
    )
    b = batch("node-a", 2)
    b.tables.update(columns_by_table([forged_id]))
    assert controller.ship(b).status == 400
    own = Finding(
        1_795_000_000.0, "straggler/j/1", FindingKind.STRAGGLER, Severity.WARNING, "job/j/rank/1", "slow"
    )  # no host
    b = batch("node-a", 3)
    b.tables.update(columns_by_table([own]))
    assert controller.ship(b).status == 200
    found = controller.get("/v1/findings?since=1795000000").doc["findings"]
    assert [(f["finding_id"], f["host"]) for f in found] == [("straggler/j/1", "node-a")]


def test_an_operator_token_cannot_ship(controller: Controller) -> None:
    assert controller.ship(batch("node-a", 1), token=controller.tokens["operator"]).status == 403


def test_an_oversized_body_is_413(controller: Controller) -> None:
    assert controller.post("/v1/ingest", b"x" * (300 * 1024), controller.tokens["node-a"]).status == 413


def test_a_gzip_bomb_is_413(controller: Controller) -> None:
    bomb = gzip.compress(b" " * (80 << 20))
    assert len(bomb) < 256 * 1024
    assert controller.post("/v1/ingest", bomb, controller.tokens["node-a"]).status == 413


def test_malformed_batches_are_400(controller: Controller) -> None:
    token = controller.tokens["node-a"]
    assert controller.post("/v1/ingest", b"not gzip", token).status == 400
    assert controller.post("/v1/ingest", gzip.compress(b"[1, 2"), token).status == 400
    assert controller.post("/v1/ingest", gzip.compress(b"[" * 100 + b"]" * 100), token).status == 400
    doc = batch("node-a", 1).to_json()
    doc["tables"] = {"no_such_table": {"ts": [1.0]}}
    assert controller.post("/v1/ingest", gzip.compress(json.dumps(doc).encode()), token).status == 400


def test_a_value_its_column_cannot_hold_is_400_and_nothing_is_stored(controller: Controller) -> None:
    b = batch("node-a", 1)
    b.tables["gpu_samples"]["gpu_index"][0] = 2**63
    reply = controller.ship(b)
    assert (reply.status, reply.doc["reason"]) == (400, "invalid_value")
    assert "gpu_index" in reply.doc["error"]
    assert metric_value(controller.metrics(), "fleetguard_controller_batches_committed_total") == 0


def test_refusals_are_counted_by_reason(controller: Controller) -> None:
    controller.post("/v1/ingest", encode(batch("node-a", 1)), None)
    controller.ship(batch("node-b", 1), token=controller.tokens["node-a"])
    controller.post("/v1/ingest", b"junk", controller.tokens["node-a"])
    text = controller.metrics()
    for reason in ("unauthenticated", "wrong_host", "malformed"):
        assert f'fleetguard_controller_batches_refused_total{{reason="{reason}"}} 1' in text


def test_records_and_send_times_far_ahead_of_the_controllers_clock_are_400(controller: Controller) -> None:
    # A finding dated 2199 would stay "open" and newest for ever; a send time in 2199 would stick as the
    # host's last_sent (its lag, its jobs' analysis clock) for the rest of its boot.
    now = time.time()
    future = Finding(
        now + 10 * 365 * 86400, "straggler/j/9", FindingKind.STRAGGLER, Severity.WARNING, "job/j/rank/9", "x"
    )
    b = batch("node-a", 1)
    b.tables.update(columns_by_table([future]))
    assert controller.ship(b).status == 400
    assert controller.ship(batch("node-a", 2, ts=now + 86400)).status == 400
    assert controller.ship(batch("node-a", 3, ts=now + 60)).status == 200  # a little clock skew is fine
    assert controller.get(f"/v1/findings?since={now - 60:.0f}").doc["findings"] == []


def test_an_action_is_stored_with_the_host_of_the_batch_and_may_not_name_another(
    controller: Controller,
) -> None:
    now = time.time()
    own = ActionRecord(
        now, "act-1", ActionKind.RESTART, "job/j", "straggler/j/1", ActionOutcome.SUCCEEDED
    )  # names no host
    b = batch("node-a", 1)
    b.tables.update(columns_by_table([own]))
    assert controller.ship(b).status == 200
    forged = ActionRecord(
        now, "act-2", ActionKind.RESTART, "job/j", None, ActionOutcome.SUCCEEDED, host="node-b"
    )
    b = batch("node-a", 2)
    b.tables.update(columns_by_table([forged]))
    assert controller.ship(b).status == 400
    path = controller.config_overrides["store.path"]
    controller.running.stop()
    con = duckdb.connect(path, read_only=True)
    try:
        assert con.execute("SELECT action_id, host FROM actions").fetchall() == [("act-1", "node-a")]
    finally:
        con.close()


def test_read_api_query_numbers_that_are_not_ascii_digits_or_epoch_seconds_are_400(
    controller: Controller,
) -> None:
    operator = controller.tokens["operator"]
    for query in ("limit=%C2%B2", "limit=%D9%A3", "limit=-1", "since=nan", "since=1e400", "since=-5"):
        assert controller.get(f"/v1/findings?{query}", operator).status == 400, query
    assert controller.get("/v1/findings?limit=3&since=0", operator).status == 200
