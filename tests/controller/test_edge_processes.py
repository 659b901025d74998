"""`[controller] edge_processes`: bodies checked in worker processes answer exactly as the in-process edge
does, and a worker killed while it holds a batch loses nothing acknowledged and stops nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest

from fleetguard.config import ConfigError, load_config
from fleetguard.controller.edge_pool import EdgePool
from fleetguard.controller.edge_wire import EdgeReplyError, decode_reply, encode_batch, encode_refusal
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.shipping.wire import columns_by_table, encode
from tests.controller.helpers import Controller, Reply, batch, metric_value, start_test_controller


def _bodies() -> list[tuple[str, bytes, str]]:
    """(what, gzip body, the token's host): one of each check the edge makes, and good batches."""
    now = time.time()
    out: list[tuple[str, bytes, str]] = [("good", encode(batch("node-a", 1)), "node-a")]
    wrong_host = batch("node-b", 2)
    out.append(("another host's batch", encode(wrong_host), "node-a"))
    row_host = batch("node-a", 3)
    row_host.tables["gpu_samples"]["host"][0] = "node-b"
    out.append(("a row of another host", encode(row_host), "node-a"))
    big = batch("node-a", 4)
    big.tables["gpu_samples"]["gpu_index"][0] = 2**63
    out.append(("int64 bound", encode(big), "node-a"))
    counter = batch("node-a", 5)
    counter.tables["nic_counters"]["value"][0] = 2**64
    out.append(("uint64 bound", encode(counter), "node-a"))
    out.append(("an hour ahead", encode(batch("node-a", 6, ts=now + 7200)), "node-a"))
    forged = batch("node-a", 7)
    forged.tables.update(
        columns_by_table(
            [Finding(now, "host_silent:node-b:1", FindingKind.HOST_SILENT, Severity.WARNING, "host/x", "x")]
        )
    )
    out.append(("a controller's finding", encode(forged), "node-a"))
    text = json.dumps(batch("node-a", 8).to_json())
    out.append(
        (
            "NaN",
            gzip.compress(
                text.replace('"utilization_gpu_percent": [50.0', '"utilization_gpu_percent": [NaN').encode()
            ),
            "node-a",
        )
    )
    out.append(("lone surrogate", gzip.compress(text.replace('"test"', '"t\\ud800"').encode()), "node-a"))
    out.append(("nesting", gzip.compress(b"[" * 100_000 + b"]" * 100_000), "node-a"))
    out.append(("not gzip", b"not gzip", "node-a"))
    out.append(("gzip bomb", gzip.compress(b" " * (80 << 20)), "node-a"))
    out.append(("not JSON", gzip.compress(b"[1, 2"), "node-a"))
    out.append(("good, another seq", encode(batch("node-a", 9)), "node-a"))
    return out


def _answer(c: Controller, body: bytes, host: str) -> tuple[int, object]:
    reply = c.post("/v1/ingest", body, c.tokens[host])
    doc = reply.doc if isinstance(reply.doc, dict) else {}
    return reply.status, (doc.get("reason"), doc.get("error"), doc.get("duplicate"))


def test_edge_processes_answer_every_body_as_the_in_process_edge_does(tmp_path: Path) -> None:
    bodies = _bodies()
    answers = []
    for n in (0, 2):
        c = start_test_controller(tmp_path / str(n), extra={"controller.max_body_bytes": 1 << 20})
        try:
            answers.append([(what, *_answer(c, body, host)) for what, body, host in bodies])
        finally:
            c.running.stop()
    in_process, pooled = answers
    assert pooled == in_process
    statuses = {what: status for what, status, _ in pooled}
    assert statuses["good"] == statuses["good, another seq"] == 200
    assert statuses["another host's batch"] == 403
    assert statuses["gzip bomb"] == 413
    assert all(
        s == 400
        for what, s in statuses.items()
        if what not in ("good", "good, another seq", "another host's batch", "gzip bomb")
    )


def _stored_gpu_rows(path: str) -> int:
    con = duckdb.connect(path, read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM gpu_samples").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def _wait_until(predicate: object, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.01)


def test_a_worker_killed_while_it_holds_a_batch_loses_nothing_acknowledged_and_ingest_goes_on(
    tmp_path: Path,
) -> None:
    c = start_test_controller(tmp_path, extra={"controller.edge_processes": 1})
    try:
        edge = c.running.api.edge
        assert isinstance(edge, EdgePool)
        acknowledged = 0
        for seq in (1, 2):
            assert c.ship(batch("node-a", seq)).status == 200
            acknowledged += 1
        (worker,) = edge.processes
        os.kill(worker, signal.SIGSTOP)  # it holds the next body and never answers
        try:
            replies: list[Reply] = []
            sender = threading.Thread(target=lambda: replies.append(c.ship(batch("node-a", 3))))
            sender.start()
            _wait_until(lambda: edge.busy == 1, "the batch reached the worker")
            os.kill(worker, signal.SIGKILL)
        finally:
            with contextlib.suppress(ProcessLookupError):  # reaped already, once it was killed
                os.kill(worker, signal.SIGCONT)
        sender.join(timeout=30)
        (held,) = replies
        assert (held.status, held.doc["reason"]) == (503, "overloaded")
        assert "Retry-After" in held.headers
        assert edge.restarts == 1 and edge.processes != [worker]
        metrics = c.metrics()
        assert metric_value(metrics, "fleetguard_controller_edge_process_restarts_total") == 1
        assert metric_value(metrics, "fleetguard_controller_edge_processes") == 1
        # The agent sends it again: stored once, and the next ones go on.
        for seq in (3, 4):
            reply = c.ship(batch("node-a", seq))
            assert (reply.status, reply.doc["duplicate"]) == (200, False)
            acknowledged += 1
    finally:
        c.running.stop()
    assert _stored_gpu_rows(c.config_overrides["store.path"]) == 2 * acknowledged  # two GPUs a batch


def test_a_pool_replaces_a_worker_that_died_while_idle(tmp_path: Path) -> None:
    pool = EdgePool(1)
    try:
        body = encode(batch("node-a", 1))
        assert pool.parse(body, "node-a", compressed=True, now=time.time()).seq == 1
        (worker,) = pool.processes
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(BatchRefused) as refused:
            pool.parse(body, "node-a", compressed=True, now=time.time())
        assert refused.value.reason is Refusal.OVERLOADED
        checked = pool.parse(body, "node-a", compressed=True, now=time.time())
        assert _plain(checked) == _plain(parse_batch(body, "node-a", now=time.time()))
        assert pool.restarts == 1
    finally:
        pool.stop()
    assert pool.processes == []


def _plain(b: IngestBatch) -> object:
    """A batch with its columns as lists (arrays compared value by value; NaN, a float column's NULL in an
    array, as None)."""

    def values(v: object) -> object:
        if isinstance(v, np.ndarray):
            return [None if isinstance(x, float) and math.isnan(x) else x for x in v.tolist()]
        return v

    tables = {name: {c: values(v) for c, v in columns.items()} for name, columns in b.tables.items()}
    return dataclasses.replace(b, tables=tables)


def test_what_comes_back_from_a_worker_is_read_by_type_only() -> None:
    checked = parse_batch(encode(batch("node-a", 1)), "node-a")
    back = decode_reply(encode_batch(checked))
    assert _plain(back) == _plain(checked)
    # The telemetry tables' number columns come back as arrays of the schema's own dtype.
    assert back.tables["gpu_samples"]["utilization_gpu_percent"].dtype == np.float64
    assert back.tables["nic_counters"]["value"].dtype == np.uint64
    assert isinstance(back.tables["gpu_samples"]["uuid"], list)
    with pytest.raises(BatchRefused) as refused:
        decode_reply(encode_refusal("too_large", "body inflates past 16 bytes"))
    assert (refused.value.reason, refused.value.message) == (Refusal.TOO_LARGE, "body inflates past 16 bytes")
    for garbage in (b"\x80", encode_refusal("no_such_reason", "x"), b"\xc1\x00", json.dumps([1]).encode()):
        with pytest.raises(EdgeReplyError):
            decode_reply(garbage)


@pytest.mark.parametrize("value", [-1, 17])
def test_edge_processes_is_bounded(value: int) -> None:
    with pytest.raises(ConfigError, match=r"controller\.edge_processes: must be from 0 to 16"):
        load_config(overrides={"controller.edge_processes": value})


def test_a_reply_whose_buffers_do_not_fit_their_columns_is_not_a_reply() -> None:
    import msgspec

    from fleetguard.controller.edge_wire import EdgeReply

    good = msgspec.msgpack.decode(
        encode_batch(parse_batch(encode(batch("node-a", 1)), "node-a")), type=EdgeReply
    )
    for buffers in (
        {"gpu_samples": {"utilization_gpu_percent": b"\0" * 7}},  # not whole float64s
        {"gpu_samples": {"utilization_gpu_percent": b"\0" * 8 * 5}},  # another length than the table's
        {"gpu_samples": {"uuid": b"\0" * 16}},  # a text column
        {"findings": {"ts": b"\0" * 8}},  # a table whose columns travel as values
    ):
        forged = msgspec.structs.replace(good, buffers=buffers)
        with pytest.raises(EdgeReplyError):
            decode_reply(msgspec.msgpack.encode(forged))


def test_a_worker_that_does_not_answer_in_time_is_replaced_and_its_request_answered_503() -> None:
    # Long enough for a replacement to start on a loaded machine (its first answer waits for its imports).
    pool = EdgePool(1, timeout_seconds=4.0)
    try:
        (worker,) = pool.processes
        os.kill(worker, signal.SIGSTOP)  # alive, holding the body, never answering
        body = encode(batch("node-a", 1))
        with pytest.raises(BatchRefused) as refused:
            pool.parse(body, "node-a", compressed=True, now=time.time())
        assert refused.value.reason is Refusal.OVERLOADED
        assert worker not in pool.processes and pool.restarts == 1
        assert pool.parse(body, "node-a", compressed=True, now=time.time()).seq == 1
    finally:
        pool.stop()


def test_a_worker_that_could_not_be_started_is_started_by_the_next_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    pool = EdgePool(1)
    try:
        (worker,) = pool.processes
        os.kill(worker, signal.SIGKILL)
        real_popen = subprocess.Popen
        failures = [OSError(11, "Resource temporarily unavailable")]

        def popen_failing_once(*args: object, **kwargs: object) -> object:
            if failures:
                raise failures.pop()  # the machine out of processes, once
            return real_popen(*args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(subprocess, "Popen", popen_failing_once)  # the module edge_pool calls it through
        body = encode(batch("node-a", 1))
        with pytest.raises(BatchRefused):  # its worker is gone and none could be started in its place
            pool.parse(body, "node-a", compressed=True, now=time.time())
        assert pool.processes == [] and not failures
        assert (
            pool.parse(body, "node-a", compressed=True, now=time.time()).seq == 1
        )  # started, not waited for
        assert len(pool.processes) == 1
    finally:
        pool.stop()


@pytest.mark.parametrize("forged", ["batch", "row"])
def test_a_worker_whose_answer_names_another_host_is_not_believed(
    monkeypatch: pytest.MonkeyPatch, forged: str
) -> None:
    """A worker parses a hostile peer's bytes: were it subverted, its answer must still not write another
    host's rows. An answer naming another host than the token's (the batch, or any row) is refused and the
    worker replaced, as a worker that answered garbage."""
    from fleetguard.controller import edge_pool

    real = decode_reply

    def subverted(frame: bytes) -> IngestBatch:
        got = real(frame)
        if forged == "batch":
            return dataclasses.replace(got, host="node-b")
        tables = {n: {**c, "host": ["node-b"] * len(c["host"])} for n, c in got.tables.items() if "host" in c}
        return dataclasses.replace(got, tables={**got.tables, **tables})

    pool = EdgePool(1)
    try:
        (worker,) = pool.processes
        monkeypatch.setattr(edge_pool, "decode_reply", subverted)
        with pytest.raises(BatchRefused) as refused:
            pool.parse(encode(batch("node-a", 1)), "node-a", compressed=True, now=time.time())
        assert refused.value.reason is Refusal.OVERLOADED
        assert worker not in pool.processes and pool.restarts == 1
        monkeypatch.setattr(edge_pool, "decode_reply", real)
        assert pool.parse(encode(batch("node-a", 2)), "node-a", compressed=True, now=time.time()).seq == 2
    finally:
        pool.stop()


def test_a_pool_whose_workers_cannot_start_yet_starts_and_starts_them_at_the_first_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of pids at the controller's start: the pool is made short (one log line), not a failed start."""
    import subprocess

    real_popen = subprocess.Popen
    failures = [OSError(11, "Resource temporarily unavailable")]

    def popen_failing_once(*args: object, **kwargs: object) -> object:
        if failures:
            raise failures.pop()
        return real_popen(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", popen_failing_once)
    pool = EdgePool(1)
    try:
        assert pool.processes == [] and not failures
        assert pool.parse(encode(batch("node-a", 1)), "node-a", compressed=True, now=time.time()).seq == 1
        assert len(pool.processes) == 1
    finally:
        pool.stop()
