"""The ingest edge (gunzip, typed decode, every check of `validate.parse_batch`), in this interpreter or in
edge processes of its own (`[controller] edge_processes`).

In process, a batch's edge work holds the controller's one interpreter lock for ~0.6 ms, beside the HTTP
loop and the writer lanes' Python; at 4,096 hosts that lock, not the two cores, bounds ingest. An
`EdgePool` hands each raw body to one of N worker processes (`edge_worker`) over a Unix socket pair and
waits, lock released, for the checked batch (msgpack read by a typed decoder: `edge_wire`). The handler
thread itself talks to the worker: no extra thread, no hand-off.

A worker that dies, answers garbage or takes longer than EDGE_TIMEOUT_SECONDS is killed and replaced; the
request it held is answered 503 (the agent sends it again; nothing was acknowledged). The replacement is
usable at once: the next request waits in its socket while it starts.
"""

from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Protocol

from fleetguard.config import MAX_EDGE_PROCESSES
from fleetguard.controller.edge_wire import (
    HEADER,
    MAX_FRAME_BYTES,
    EdgeReplyError,
    decode_reply,
    encode_request,
)
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch

log = logging.getLogger(__name__)

# Parsing in process is CPU under the lock: more at once is no faster, and bounds the memory requests hold.
MAX_CONCURRENT_PARSES = 2
# A body is checked in ~1 ms; one that takes this long has found a worker stuck (or a machine stalled).
EDGE_TIMEOUT_SECONDS = 30.0
# How long a request waits for a free worker before it is answered 503 (every worker busy this long:
# the controller is far behind).
WAIT_FOR_WORKER_SECONDS = 30.0


class Edge(Protocol):
    def parse(self, body: bytes, host: str, *, compressed: bool, now: float) -> IngestBatch:
        """The checked batch; BatchRefused naming why not."""
        ...

    def stop(self) -> None: ...


class InProcessEdge:
    """`[controller] edge_processes = 0`: the checks on the handler thread, two at a time."""

    def __init__(self) -> None:
        self._parsing = threading.BoundedSemaphore(MAX_CONCURRENT_PARSES)

    def parse(self, body: bytes, host: str, *, compressed: bool, now: float) -> IngestBatch:
        with self._parsing:
            return parse_batch(body, host, compressed=compressed, now=now)

    def stop(self) -> None:
        pass


@dataclass(eq=False)  # hashed by identity: the pool's set of live workers
class _Worker:
    process: subprocess.Popen[bytes]
    sock: socket.socket


class EdgeWorkerLost(Exception):
    """The worker holding a request died, hung or answered garbage."""


class EdgePool:
    """N edge processes; `parse` runs on the calling (handler) thread and blocks, lock released, on one."""

    def __init__(self, processes: int, timeout_seconds: float = EDGE_TIMEOUT_SECONDS) -> None:
        if not 1 <= processes <= MAX_EDGE_PROCESSES:
            raise ValueError(f"edge processes: expected 1 to {MAX_EDGE_PROCESSES}")
        self._timeout = timeout_seconds
        self._size = processes
        self._lock = threading.Lock()
        self._topping_up = threading.Lock()  # one thread at a time starts missing workers
        self._stopped = False
        self._all: set[_Worker] = set()  # every live worker, idle or busy (under _lock)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self.restarts = 0  # workers replaced after dying, hanging or answering garbage
        # As after a loss: a worker that cannot be started now (out of pids or memory) is one line and is
        # started by the first request, not a controller that fails to start.
        self._top_up()

    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "fleetguard.controller.edge_worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                # Its own session: a Ctrl-C at the controller's terminal stops the controller, which
                # closes the socket; the worker ends at that end of stream, not with a traceback.
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(self._timeout)
        worker = _Worker(process, ours)
        with self._lock:
            if self._stopped:
                _end(worker, kill=True)
                raise BatchRefused(Refusal.OVERLOADED, "the controller is stopping")
            self._all.add(worker)
        return worker

    def parse(self, body: bytes, host: str, *, compressed: bool, now: float) -> IngestBatch:
        self._top_up()
        try:
            worker = self._idle.get(timeout=WAIT_FOR_WORKER_SECONDS)
        except queue.Empty:
            raise BatchRefused(Refusal.OVERLOADED, "the controller is behind; retry later") from None
        try:
            frame = _exchange(worker.sock, encode_request(host, compressed, now, body))
            batch = decode_reply(frame)
        except BatchRefused:
            self._idle.put(worker)
            raise
        except (OSError, EdgeReplyError, EdgeWorkerLost) as exc:
            self._replace(worker, exc)
            raise BatchRefused(Refusal.OVERLOADED, "the controller's edge process failed; retry") from None
        except BaseException:
            self._idle.put(worker)  # a RuntimeError the worker reported: it answered, so it is alive
            raise
        if not _only_host(batch, host):
            # The worker parsed a hostile peer's bytes: its answer is believed only for the host the token
            # named (what the in-process edge guarantees), so a subverted worker cannot write another's rows.
            self._replace(worker, EdgeWorkerLost(f"a reply for another host than {host[:64]!r}"))
            raise BatchRefused(Refusal.OVERLOADED, "the controller's edge process failed; retry")
        self._idle.put(worker)
        return batch

    def _replace(self, worker: _Worker, why: BaseException) -> None:
        with self._lock:
            self._all.discard(worker)
            stopped = self._stopped
        _end(worker, kill=True)  # dead, hung or confused: nothing it holds is worth waiting for
        if stopped:
            return
        log.warning(
            "edge process %d lost (%s; exit %s): starting another",
            worker.process.pid,
            why,
            worker.process.returncode,
        )
        with self._lock:
            self.restarts += 1
        self._top_up()

    def _top_up(self) -> None:
        """Start the workers the pool is short of (after a loss, or a start that failed before)."""
        with self._lock:
            short = not self._stopped and len(self._all) < self._size
        if not short or not self._topping_up.acquire(blocking=False):
            return
        try:
            while True:
                with self._lock:
                    if self._stopped or len(self._all) >= self._size:
                        return
                self._idle.put(self._spawn())
        except BatchRefused:
            pass  # stopping
        except OSError as exc:
            # No process could be started (out of memory, pids): the pool is short; the next request
            # tries again, and with no worker at all requests are answered 503 after their wait.
            log.error("an edge process could not be started: %s", exc)
        finally:
            self._topping_up.release()

    def exposition(self) -> list[str]:
        """/metrics lines (ControllerStats.extra): the workers alive now and how many were replaced."""
        with self._lock:
            alive = len(self._all)
        return [
            "# HELP fleetguard_controller_edge_processes Edge processes alive ([controller] edge_processes).",
            "# TYPE fleetguard_controller_edge_processes gauge",
            f"fleetguard_controller_edge_processes {alive}",
            "# HELP fleetguard_controller_edge_process_restarts_total Edge processes replaced after they "
            "died, hung or answered garbage (each one's request was answered 503).",
            "# TYPE fleetguard_controller_edge_process_restarts_total counter",
            f"fleetguard_controller_edge_process_restarts_total {self.restarts}",
        ]

    @property
    def busy(self) -> int:
        """Workers holding a request now."""
        with self._lock:
            return len(self._all) - self._idle.qsize()

    @property
    def processes(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._all]

    def stop(self) -> None:
        """End every worker (requests in flight are answered 503). Safe to call twice."""
        with self._lock:
            self._stopped = True
            workers, self._all = list(self._all), set()
        for worker in workers:
            _end(worker)


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(HEADER.pack(len(request)) + request)
    head = _read_exactly(sock, HEADER.size)
    (length,) = HEADER.unpack(head)
    if length > MAX_FRAME_BYTES:
        raise EdgeWorkerLost(f"a reply of {length} bytes")
    return _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])  # TimeoutError (an OSError) past the pool's timeout
        if not k:
            raise EdgeWorkerLost("it closed its socket")
        got += k
    return bytes(buf)


def _end(worker: _Worker, *, kill: bool = False) -> None:
    worker.sock.close()  # a live worker reads the end of its stream and exits
    if kill:
        worker.process.kill()
    try:
        worker.process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()


def make_edge(processes: int) -> Edge:
    """The edge `[controller] edge_processes` asks for: 0, in this process."""
    return EdgePool(processes) if processes else InProcessEdge()


def _only_host(batch: IngestBatch, host: str) -> bool:
    """The batch and every row it carries name `host` (the token's): a set per host column, built in C."""
    return batch.host == host and all(set(t.get("host", ())) <= {host} for t in batch.tables.values())
