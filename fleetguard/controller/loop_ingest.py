"""POST /v1/ingest answered from the HTTP server's loop thread, with one thread of its own that journals.

Why: on a worker thread a batch cost ~30-40 kernel thread switches (the loop hands the request to one of 32
workers; the worker queues for the interpreter lock beside 31 others, leads or joins the journal's group
commit, waits, wakes the loop), and at 2,048 hosts a quarter of the controller's CPU went to waking
workers (BENCHMARKS.md, "Issue 22, session 9"). Here the loop itself checks the batch (gunzip, decode,
every check: ~0.3 ms for a wire-v2 batch, as long as the worker took, without the hand-off) and queues it
for the journal thread, which takes every batch queued since its last append in one `IngestWriter.accept`
(one append, one fdatasync) and gives all their answers back to the loop in one call. Per batch that is a
queue put and a future; per group, one wake of each thread.

What stays on the workers: bodies that inflate past INLINE_BYTES (a 16 MiB body's checks must not stall
every connection's loop), a controller without a journal (each answer waits on a DuckDB commit) and one with
edge processes (each parse blocks on a socket). The checks, the refusals and the answers are the same
functions either way (`ControllerApi.checked_entry`, `refused`, `_committed_reply`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fleetguard.controller.ingest import IngestResult, IngestWriter
from fleetguard.controller.journal import JournalEntry
from fleetguard.controller.tokens import Identity
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, decompress
from fleetguard.httpserve import Request, Response

log = logging.getLogger(__name__)

# A body that inflates past this is checked on a worker: a typical batch is 20-60 KB inflated, and the
# largest allowed (16 MiB) would hold the loop, and with it every connection, for a second. The bound is on
# what it inflates to, not what was sent: a small gzip body may hold 16 MiB of spaces.
INLINE_BYTES = 256 << 10
# Batches checked and waiting for the journal thread. Each connection has at most one request in flight, so
# the connection cap bounds it already; this bound holds whatever that cap is set to (beyond: 503).
MAX_WAITING = 4096


@dataclass(slots=True)
class _Waiting:
    batch: IngestBatch
    entry: JournalEntry
    answer: asyncio.Future[Response]


Answer = Callable[[int, IngestResult], Response]  # (seq, result) -> the 200 an agent reads
Refuse = Callable[[BatchRefused], Response]


class JournalThread:
    """One thread that hands every batch waiting to `writer.accept` at once and settles their futures on
    the loop that made them."""

    def __init__(self, writer: IngestWriter, answer: Answer, refuse: Refuse, settled: Callable[[str], None]):
        self._writer = writer
        self._answer = answer
        self._refuse = refuse
        self._settled = settled  # called on the loop once per batch answered (the in-flight count)
        self._queue: queue.SimpleQueue[list[_Waiting] | None] = queue.SimpleQueue()
        self._turn: list[_Waiting] = []  # checked in this turn of the loop (loop thread only)
        self._waiting = 0  # queued, not yet taken (loop thread adds, journal thread takes: under _count)
        self._count = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fleetguard-ingest-journal", daemon=True)
        self._stopped = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Answer what waits (503: nothing was acknowledged) and end the thread."""
        self._stopped = True
        self._queue.put(None)
        self._thread.join(timeout=10)

    def submit(self, batch: IngestBatch, entry: JournalEntry) -> asyncio.Future[Response]:
        """Loop thread: the future of this batch's answer. Raises BatchRefused (overloaded) when full.
        The batches checked in one turn of the loop are handed over together, at its end: one queue put
        and one wake of the journal thread for them all, not one each."""
        with self._count:
            if self._stopped or self._waiting >= MAX_WAITING:
                raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later")
            self._waiting += 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Response] = loop.create_future()
        if not self._turn:
            loop.call_soon(self._hand_over)
        self._turn.append(_Waiting(batch, entry, future))
        return future

    def _hand_over(self) -> None:
        """Loop thread, once a turn: what this turn checked goes to the journal thread."""
        turn, self._turn = self._turn, []
        self._queue.put(turn)

    def _take(self) -> list[_Waiting] | None:
        first = self._queue.get()
        if first is None:
            return None
        group = list(first)
        while True:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._queue.put(None)  # seen after this group
                break
            group += more
        with self._count:
            self._waiting -= len(group)
        return group

    def _run(self) -> None:
        # A batch whose future was cancelled (its request's task ended: the server's loop shutting down with
        # it in flight) is still journaled, but its answer carries no command and none is counted delivered:
        # `accept` asks each future, under the writer's lock, as it chooses that batch's commands (done() is
        # one attribute read, safe from this thread). A cancel after that choice still counts its copies;
        # that window is the one every answer has after it is chosen (written to a peer that is gone, lost
        # on the wire): the count is of copies sent, at least once, and the command rides on the next answer.
        while True:
            group = self._take()
            if group is None:
                break
            if self._stopped:
                self._settle(group, [self._refuse(_STOPPING) for _ in group])
                continue
            try:
                results = self._writer.accept([(w.batch, w.entry) for w in group], awaited=_awaited(group))
                answers = [
                    self._refuse(r) if isinstance(r, BatchRefused) else self._answer(w.batch.seq, r)
                    for w, r in zip(group, results, strict=True)
                ]
            except Exception:
                log.exception("ingest journal thread: a group of %d batches failed", len(group))
                answers = [self._refuse(_FAILED) for _ in group]  # each counted, as on a worker
            self._settle(group, answers)
        # stopped: whatever came after the stop mark is answered too
        rest: list[_Waiting] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                rest += item
        if rest:
            self._settle(rest, [self._refuse(_STOPPING) for _ in rest])

    def _settle(self, group: list[_Waiting], answers: list[Response]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Waiting, Response]]] = {}
        for w, a in zip(group, answers, strict=True):
            by_loop.setdefault(w.answer.get_loop(), []).append((w, a))
        for loop, pairs in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._set, pairs)
            except RuntimeError:  # the loop is closed (the server stopped): nobody waits for these
                for w, _ in pairs:
                    self._settled(w.batch.host)

    def _set(self, pairs: list[tuple[_Waiting, Response]]) -> None:
        # Every answer first: a release that raised must not leave the rest of the group unanswered.
        for w, a in pairs:
            if not w.answer.done():  # cancelled: its request's task ended (the loop shut down meanwhile)
                w.answer.set_result(a)
        for w, _ in pairs:
            try:
                self._settled(w.batch.host)
            except Exception:
                log.exception("ingest: releasing %s's count of batches in flight failed", w.batch.host[:64])


def _awaited(group: list[_Waiting]) -> Callable[[int], bool]:
    """Whether the request of the group's item i still waits for its answer (its future not cancelled)."""
    return lambda i: not group[i].answer.done()


_STOPPING = BatchRefused(Refusal.OVERLOADED, "the controller is stopping; retry later")
_FAILED = BatchRefused(Refusal.STORE_FAILED, "the controller's journal cannot be written")


class IngestApi(Protocol):
    """What LoopIngest needs of the controller's API (ControllerApi)."""

    def known_identity(self, request: Request) -> Identity | None: ...
    def checked_entry(
        self, request: Request, inflated: bytes | None = None, identity: Identity | None = None
    ) -> tuple[IngestBatch, JournalEntry | None]: ...
    def hold_host(self, host: str) -> None: ...
    def release_host(self, host: str) -> None: ...
    def committed_reply(self, seq: int, result: IngestResult) -> Response: ...
    def refused(self, exc: BatchRefused) -> Response: ...


class LoopIngest:
    """The server's `quick=` for POST /v1/ingest: None (a worker's) for anything else."""

    def __init__(self, api: IngestApi, writer: IngestWriter):
        self._api = api
        self.journal_thread = JournalThread(writer, api.committed_reply, api.refused, api.release_host)

    def __call__(self, request: Request) -> Response | asyncio.Future[Response] | None:
        if request.method != "POST" or request.path != "/v1/ingest":
            return None
        api = self._api
        # Who sent it first, from the tokens read already: a token not known (a guess, a new one) or one due
        # its once-a-second look at the tokens file goes to a worker, which may wait on that file and its
        # lock; and a client with no token never makes the loop inflate its body.
        identity = api.known_identity(request)
        if identity is None:
            return None
        inflated = _inline(request)
        if inflated is None:
            return None  # a worker reads it, with the full bounds (and names any refusal)
        try:
            batch, entry = api.checked_entry(request, inflated, identity)
            assert entry is not None  # a LoopIngest is made only where there is a journal
            api.hold_host(batch.host)
            try:
                return self.journal_thread.submit(batch, entry)
            except BaseException:
                api.release_host(batch.host)
                raise
        except BatchRefused as exc:
            return api.refused(exc)


def _inline(request: Request) -> bytes | None:
    """The body as the checks read it (inflated), if it is small enough to check on the loop; else None."""
    body = request.body
    encoding = request.headers.get("content-encoding", "identity").lower()
    if encoding == "identity":
        return body if len(body) <= INLINE_BYTES else None
    if encoding != "gzip" or len(body) > INLINE_BYTES:  # (a gzip body is never much larger than its text)
        return None
    try:
        return decompress(body, INLINE_BYTES)
    except BatchRefused:  # past the bound, or not gzip: the worker's reading says which, as it always has
        return None
