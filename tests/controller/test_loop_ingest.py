"""POST /v1/ingest answered from the server's loop: the batches checked in one turn go to the journal
thread together, and every answer is the one a worker would have given (same checks, same refusals, the
in-flight cap per host, 503 when the journal cannot take them, 503 to what waits when the controller
stops)."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fleetguard.controller import loop_ingest, tokens, validate
from fleetguard.controller.ingest import IngestResult
from fleetguard.controller.journal import JournalEntry
from fleetguard.controller.loop_ingest import INLINE_BYTES, JournalThread
from fleetguard.controller.tokens import add_token
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.httpserve import HttpServer, Response
from fleetguard.shipping.wire import encode
from fleetguard.store import Store
from tests.controller.helpers import batch, metric_value, start_test_controller


def test_concurrent_batches_of_many_hosts_are_answered_on_the_loop_and_all_stored(tmp_path: Path) -> None:
    hosts = tuple(f"node-{i:02d}" for i in range(24))
    c = start_test_controller(tmp_path, hosts)
    try:
        assert c.running.api.loop_ingest is not None, "a journaled, in-process controller ingests on its loop"
        bodies = [(h, encode(batch(h, seq))) for seq in (1, 2, 3) for h in hosts]

        def send(item: tuple[str, bytes]) -> int:
            host, body = item
            return c.post("/v1/ingest", body, c.tokens[host]).status

        with ThreadPoolExecutor(24) as pool:
            statuses = list(pool.map(send, bodies))
        assert statuses == [200] * len(bodies)
        c.settle()
        text = c.metrics()
        assert metric_value(text, "fleetguard_controller_batches_committed_total") == len(bodies)
        assert metric_value(text, "fleetguard_controller_journal_appended_total") == len(bodies)
        # each sync covers one or more batches: never more syncs than appends
        syncs = metric_value(text, "fleetguard_controller_journal_syncs_total")
        assert 1 <= syncs <= len(bodies)
        # every sync timed: the histogram counts each one, all below +Inf
        assert metric_value(text, "fleetguard_controller_journal_sync_seconds_count") == syncs
        assert 'fleetguard_controller_journal_sync_seconds_bucket{le="+Inf"} ' + str(int(syncs)) in text
        # a resend of any of them is a duplicate, stored once
        again = c.ship(batch(hosts[5], 2))
        assert again.status == 200 and again.doc["duplicate"] is True
        assert metric_value(c.metrics(), "fleetguard_controller_batches_committed_total") == len(bodies)
    finally:
        c.running.stop()


def test_a_refusal_on_the_loop_is_the_workers_refusal(tmp_path: Path) -> None:
    c = start_test_controller(tmp_path)
    try:
        good = encode(batch("node-a", 1))
        no_token = c.post("/v1/ingest", good, None)
        assert no_token.status == 401 and no_token.doc["reason"] == "unauthenticated"
        other_host = c.post("/v1/ingest", good, c.tokens["node-b"])
        assert other_host.status == 403 and other_host.doc["reason"] == "wrong_host"
        operator = c.post("/v1/ingest", good, c.tokens["operator"])
        assert operator.status == 403
        garbage = c.post("/v1/ingest", gzip.compress(b"{not json"), c.tokens["node-a"])
        assert garbage.status == 400 and garbage.doc["reason"] == "malformed"
        deflate = c.post("/v1/ingest", good, c.tokens["node-a"], encoding="deflate")
        assert deflate.status == 400 and "deflate" in deflate.doc["error"]
        ok = c.post("/v1/ingest", good, c.tokens["node-a"])
        assert ok.status == 200 and ok.doc["duplicate"] is False and ok.doc["wire"] == [1, 2]
    finally:
        c.running.stop()


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_body_past_the_inline_bound_is_checked_on_a_worker_and_stored(
    tmp_path: Path, encoding: str
) -> None:
    # gzip: a small body that inflates past the bound (spaces compress ~1,000 to 1) is the worker's too
    c = start_test_controller(tmp_path, extra={"controller.max_body_bytes": 2 * INLINE_BYTES})
    try:
        doc = json.loads(gzip.decompress(encode(batch("node-a", 1))))
        text = json.dumps(doc, indent=1) + " " * (INLINE_BYTES + 1000)  # JSON allows the padding
        body = text.encode() if encoding == "identity" else gzip.compress(text.encode())
        assert len(text) > INLINE_BYTES
        loop_api = c.running.api.loop_ingest
        assert loop_api is not None
        seen: list[Any] = []
        original = loop_api.__call__

        def spy(request: Any) -> Any:
            answer = original(request)
            seen.append(answer)
            return answer

        c.running.server._quick = spy  # the server's loop asks the spy, which asks the real one
        reply = c.post("/v1/ingest", body, c.tokens["node-a"], encoding=encoding)
        assert reply.status == 200 and reply.doc["duplicate"] is False
        assert seen == [None], "the loop handed the large body to a worker"
        assert metric_value(c.metrics(), "fleetguard_controller_batches_committed_total") == 1
    finally:
        c.running.stop()


# ---- the journal thread on its own: a writer whose accept we hold --------------------------------------


class _HeldWriter:
    """IngestWriter.accept's contract (one answer per item, in order), held until released."""

    def __init__(self, fail: bool = False) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()  # an accept is under way
        self.calls: list[int] = []
        self.fail = fail

    def accept(
        self, items: list[tuple[IngestBatch, JournalEntry]], **_options: object
    ) -> list[IngestResult | BatchRefused]:
        self.entered.set()
        self.release.wait(10)
        self.calls.append(len(items))
        if self.fail:
            raise OSError("disk gone")
        return [IngestResult(duplicate=False, commands=[]) for _ in items]


def _batches(n: int, host: str = "node-a") -> list[tuple[IngestBatch, JournalEntry]]:
    now = time.time()
    out = []
    for seq in range(1, n + 1):
        body = encode(batch(host, seq))
        out.append((parse_batch(body, host, compressed=True, now=now), JournalEntry(host, body, True, now)))
    return out


def _thread(writer: _HeldWriter, settled: list[str], refusals: list[str] | None = None) -> JournalThread:
    def answer(seq: int, result: IngestResult) -> Response:
        return Response.json(200, {"seq": seq, "duplicate": result.duplicate})

    def refuse(exc: BatchRefused) -> Response:  # the API's counts each refusal it makes
        if refusals is not None:
            refusals.append(exc.reason.value)
        return Response.json(exc.status, {"reason": exc.reason.value})

    return JournalThread(writer, answer, refuse, settled.append)  # type: ignore[arg-type]


def test_the_batches_of_one_turn_reach_the_journal_in_one_accept() -> None:
    writer, settled = _HeldWriter(), list[str]()
    journal_thread = _thread(writer, settled)
    journal_thread.start()

    async def one_turn() -> list[Response]:
        futures = [journal_thread.submit(b, e) for b, e in _batches(5)]  # all in this turn
        await asyncio.sleep(0)  # the turn ends: handed over
        writer.release.set()
        return list(await asyncio.gather(*futures))

    try:
        answers = asyncio.run(one_turn())
    finally:
        journal_thread.stop()
    assert writer.calls == [5]
    assert [json.loads(a.body)["seq"] for a in answers] == [1, 2, 3, 4, 5]
    assert settled == ["node-a"] * 5


def test_a_journal_that_fails_answers_its_whole_group_503_and_the_thread_goes_on() -> None:
    writer, settled, refusals = _HeldWriter(fail=True), list[str](), list[str]()
    writer.release.set()
    journal_thread = _thread(writer, settled, refusals)
    journal_thread.start()

    async def twice() -> tuple[list[Response], list[Response]]:
        first = await asyncio.gather(*(journal_thread.submit(b, e) for b, e in _batches(3)))
        writer.fail = False
        second = await asyncio.gather(*(journal_thread.submit(b, e) for b, e in _batches(2, "node-b")))
        return list(first), list(second)

    try:
        first, second = asyncio.run(twice())
    finally:
        journal_thread.stop()
    assert [(a.status, json.loads(a.body)["reason"]) for a in first] == [(503, "store_failed")] * 3
    assert refusals == ["store_failed"] * 3, "each batch refused is counted, as on a worker"
    assert [a.status for a in second] == [200, 200]
    assert sorted(settled) == ["node-a"] * 3 + ["node-b"] * 2


def test_what_waits_when_the_thread_stops_is_answered_503_and_later_batches_are_refused() -> None:
    writer, settled = _HeldWriter(), list[str]()
    journal_thread = _thread(writer, settled)
    journal_thread.start()

    async def stopped_midway() -> list[Response]:
        (b1, e1), (b2, e2) = _batches(2)
        held = journal_thread.submit(b1, e1)  # taken by the thread, which waits in accept
        assert await asyncio.to_thread(writer.entered.wait, 10)
        waiting = journal_thread.submit(b2, e2)  # queued behind it
        await asyncio.sleep(0)
        stopper = threading.Thread(target=journal_thread.stop)
        stopper.start()
        while not journal_thread._stopped:  # the stop is marked (however slow the machine) before release
            await asyncio.sleep(0.001)
        writer.release.set()
        answers = [await held, await waiting]
        stopper.join()
        with pytest.raises(BatchRefused) as refused:
            journal_thread.submit(b2, e2)
        assert refused.value.reason is Refusal.OVERLOADED
        return answers

    answers = asyncio.run(stopped_midway())
    assert answers[0].status == 200, "taken before the stop: journaled and answered"
    assert answers[1].status == 503 and json.loads(answers[1].body)["reason"] == "overloaded"
    assert settled == ["node-a", "node-a"]


def test_past_max_waiting_a_batch_is_refused_overloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_ingest, "MAX_WAITING", 3)
    writer, settled = _HeldWriter(), list[str]()
    journal_thread = _thread(writer, settled)
    journal_thread.start()

    async def flood() -> list[Response]:
        items = _batches(4)
        futures = [journal_thread.submit(b, e) for b, e in items[:3]]
        with pytest.raises(BatchRefused) as refused:
            journal_thread.submit(*items[3])
        assert refused.value.reason is Refusal.OVERLOADED
        await asyncio.sleep(0)
        writer.release.set()
        return list(await asyncio.gather(*futures))

    try:
        answers = asyncio.run(flood())
    finally:
        journal_thread.stop()
    assert [a.status for a in answers] == [200] * 3


def test_a_host_past_its_in_flight_cap_on_the_loop_is_answered_busy(tmp_path: Path) -> None:
    c = start_test_controller(tmp_path)
    writer = c.running.writer
    release = threading.Event()
    original = writer.accept

    def held(items: Any, **options: Any) -> Any:
        release.wait(20)
        return original(items, **options)

    writer.accept = held  # type: ignore[method-assign]
    try:
        with ThreadPoolExecutor(5) as pool:
            held_replies = [
                pool.submit(c.post, "/v1/ingest", encode(batch("node-a", seq)), c.tokens["node-a"])
                for seq in (1, 2, 3, 4)
            ]
            deadline = time.monotonic() + 10
            while len(c.running.api._in_flight) == 0 or c.running.api._in_flight["node-a"] < 4:
                assert time.monotonic() < deadline, "four batches of node-a held in flight"
                time.sleep(0.01)
            fifth = c.post("/v1/ingest", encode(batch("node-a", 5)), c.tokens["node-a"])
            other = pool.submit(c.post, "/v1/ingest", encode(batch("node-b", 1)), c.tokens["node-b"])
            release.set()
            assert [f.result().status for f in held_replies] == [200] * 4
            assert other.result().status == 200
        assert fifth.status == 429 and fifth.doc["reason"] == "busy"
        assert c.running.api._in_flight == {}, "every batch answered leaves the count"
    finally:
        release.set()
        c.running.stop()


def test_a_token_the_loop_does_not_know_is_looked_up_on_a_worker_and_its_body_never_inflated_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tokens file is read under a lock a worker may hold for as long as a 64 MiB file takes to parse,
    # and may sit on a slow disk: the loop (every connection's) must never wait on it. Nor may a client
    # with no token make the loop gunzip its body before it is refused.
    c = start_test_controller(tmp_path)
    book = c.running.api.tokens
    loop_name = "fleetguard-controller"  # the server's loop thread (HttpServer name=)
    reloads: list[str] = []
    inflated: list[str] = []
    real_reload = book.reload

    def reload() -> None:
        reloads.append(threading.current_thread().name)
        real_reload()

    def decompress(body: bytes, limit: int) -> bytes:
        inflated.append(threading.current_thread().name)
        return validate.decompress(body, limit)

    monkeypatch.setattr(book, "reload", reload)
    monkeypatch.setattr(loop_ingest, "decompress", decompress)
    try:
        good = encode(batch("node-a", 1))
        for token in ("not-a-token", "another-guess", None):
            refused = c.post("/v1/ingest", good, token)
            assert refused.status == 401 and refused.doc["reason"] == "unauthenticated"
        assert loop_name not in reloads, "the loop looked at the tokens file for a token it did not know"
        assert inflated == [], "the loop inflated a body before knowing who sent it"
        ok = c.post("/v1/ingest", good, c.tokens["node-a"])
        assert ok.status == 200 and ok.doc["duplicate"] is False
    finally:
        c.running.stop()


def test_a_token_revoked_stops_on_the_loop_once_its_second_has_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]  # the tokens book's monotonic clock, moved by the test
    monkeypatch.setattr(tokens, "time", SimpleNamespace(time=time.time, monotonic=lambda: now[0]))
    c = start_test_controller(tmp_path)
    answered_on_loop: list[int] = []
    loop_api = c.running.api.loop_ingest
    assert loop_api is not None

    def spy(request: Any) -> Any:
        answer = loop_api(request)
        answered_on_loop.append(answer is not None)
        return answer

    c.running.server._quick = spy
    try:
        assert c.ship(batch("node-a", 1)).status == 200  # the first look at the file: a worker's
        assert c.ship(batch("node-a", 2)).status == 200  # known, within its second: the loop's
        assert answered_on_loop == [False, True]
        add_token(tmp_path / "tokens.json", "node-a", replace=True)
        now[0] += tokens.RECHECK_SECONDS
        revoked = c.ship(batch("node-a", 3))
        assert revoked.status == 401 and revoked.doc["reason"] == "unauthenticated"
    finally:
        c.running.stop()


def test_a_connection_closed_while_its_batch_waits_leaves_no_count_and_the_batch_is_stored_once(
    tmp_path: Path,
) -> None:
    c = start_test_controller(tmp_path)
    writer = c.running.writer
    taken = threading.Event()
    release = threading.Event()
    original = writer.accept

    def held(items: Any, **options: Any) -> Any:
        taken.set()
        release.wait(20)
        return original(items, **options)

    writer.accept = held  # type: ignore[method-assign]
    body = encode(batch("node-a", 1))
    try:
        with socket.create_connection(("127.0.0.1", c.running.port), timeout=10) as sock:
            head = (
                "POST /v1/ingest HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
                f"Authorization: Bearer {c.tokens['node-a']}\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            sock.sendall(head.encode() + body)
            assert taken.wait(10), "the batch reached the journal thread"
        # the agent gave up (closed) while its batch was being journaled; the journal goes on
        release.set()
        c.settle()
        deadline = time.monotonic() + 10
        while c.running.api._in_flight:
            assert time.monotonic() < deadline, "the closed connection's batch left the in-flight count"
            time.sleep(0.01)
        again = c.ship(batch("node-a", 1))  # the agent sends it again: journaled already, a duplicate
        assert again.status == 200 and again.doc["duplicate"] is True
        assert metric_value(c.metrics(), "fleetguard_controller_batches_committed_total") == 1
    finally:
        release.set()
        c.running.stop()


def test_a_server_that_fails_to_start_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The journal thread, the writer's lanes and maintenance were started before the server: a start that
    # fails after them stops them all and closes the store (the leak check fails a test that leaves threads).
    def refuse(_server: object) -> None:
        raise OSError("cannot serve")

    monkeypatch.setattr(HttpServer, "start", refuse)
    with pytest.raises(OSError, match="cannot serve"):
        start_test_controller(tmp_path)
    names = {t.name for t in threading.enumerate()}
    assert not {n for n in names if n.startswith(("fleetguard-ingest", "fleetguard-writer"))}, names
    store = Store.open(str(tmp_path / "controller.duckdb"))  # the file's lock was let go
    store.close()
