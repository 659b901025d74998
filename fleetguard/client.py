"""The training-side client: heartbeats, step/section timings and collective progress to the local fleetguard
agent, checkpoint and stop requests back. Stdlib only; it never raises into the
training loop and never blocks it.

Three lines in a training loop::

    from fleetguard import client as fg
    fg.attach()                      # reads RANK, WORLD_SIZE, LOCAL_RANK and the job id from torchrun's env
    for step in range(start, steps):
        fg.step(step)                # marks a step boundary; runs checkpoint/stop callbacks here
        with fg.section("compute"):  # optional: time compute sections (not collectives)
            ...

The hot path only appends tuples to a bounded deque; a daemon thread posts them as JSON over HTTP/1.1 to the
loopback agent once per heartbeat interval, and the response carries the commands for this rank.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

__all__ = [
    "DEFAULT_ENDPOINT",
    "Client",
    "ClientStats",
    "Identity",
    "attach",
    "checkpoint_done",
    "checkpoint_requested",
    "close",
    "collective",
    "current",
    "on_checkpoint",
    "on_stop",
    "section",
    "step",
    "step_begin",
    "step_end",
    "stop_requested",
]

DEFAULT_ENDPOINT = "127.0.0.1:9477"
ENDPOINT_ENV = "FLEETGUARD_AGENT_URL"
REPORT_PATH = "/v1/report"
PROTOCOL_VERSION = 1
# Enough for minutes of per-step sections at any realistic step rate; beyond it the oldest timings go first.
MAX_QUEUED_TIMINGS = 8192
MAX_TIMINGS_PER_REPORT = MAX_QUEUED_TIMINGS  # one report drains the whole queue
REQUEST_TIMEOUT_SECONDS = 0.5

LOGGER_NAME = "fleetguard.client"


def _log() -> Any:
    """The client's logger, imported on first use: `logging` alone would eat a third of the import budget."""
    import logging

    return logging.getLogger(LOGGER_NAME)


class Identity:
    """Who this process is in its job (from torchrun's environment unless given)."""

    __slots__ = ("host", "job_id", "local_rank", "local_world_size", "pid", "rank", "world_size")

    def __init__(
        self,
        job_id: str,
        rank: int,
        local_rank: int,
        world_size: int,
        host: str,
        pid: int,
        local_world_size: int | None = None,
    ) -> None:
        self.job_id = _safe_job_id(job_id)
        self.local_world_size = local_world_size  # ranks on this host: the agent expects each to report
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.host = host
        self.pid = pid

    @classmethod
    def from_env(cls, job_id: str | None = None, env: dict[str, str] | None = None) -> Identity:
        e = os.environ if env is None else env
        job = job_id or e.get("FLEETGUARD_JOB_ID") or _torchrun_job_id(e) or "default"
        return cls(
            job_id=job,
            rank=_int_env(e, "RANK", 0),
            local_rank=_int_env(e, "LOCAL_RANK", 0),
            world_size=_int_env(e, "WORLD_SIZE", 1),
            host=os.uname().nodename,  # what socket.gethostname() returns, without importing socket
            pid=os.getpid(),
            local_world_size=max(0, _int_env(e, "LOCAL_WORLD_SIZE", 0)) or None,
        )


def _safe_job_id(job_id: str) -> str:
    """The agent accepts letters, digits and . _ : @ + = / - (ids fill restart commands): anything else
    becomes "_" here, so an odd FLEETGUARD_JOB_ID cannot get every report refused and the job called hung."""
    kept = "".join(c if (c.isascii() and c.isalnum()) or c in "._:@+=/-" else "_" for c in job_id[:128])
    while kept and not kept[0].isalnum():
        kept = kept[1:]
    return kept or "default"


def _torchrun_job_id(env: Mapping[str, str]) -> str | None:
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return run_id
    # torchrun's default --rdzv-id is "none" for every job: two jobs on one host would share it. The
    # rendezvous address is the same on every node and across restarts, and differs between jobs.
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if addr and port:
        return f"torchrun-{addr}-{port}"
    return run_id


class ClientStats:
    """Counters of what the background thread did (read them in tests or log them at exit)."""

    __slots__ = ("commands_received", "dropped_timings", "reports_failed", "reports_sent")

    def __init__(self) -> None:
        self.reports_sent = 0
        self.reports_failed = 0
        self.dropped_timings = 0
        self.commands_received = 0


class _Section:
    """Context manager timing one named section of the current step; cheap enough to build per call."""

    __slots__ = ("_client", "_name", "_previous", "_started")

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self._name = name
        self._started = 0.0
        self._previous: str | None = None

    def __enter__(self) -> _Section:
        c = self._client
        self._previous = c._section
        c._section = self._name
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        c = self._client
        duration = time.perf_counter() - self._started
        c._section = self._previous
        if exc_type is None and c._step is not None:
            c._push((time.time(), c._step, self._name, duration))


class _NullSection:
    __slots__ = ()

    def __enter__(self) -> _NullSection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_SECTION = _NullSection()


class Client:
    """One rank's connection to the local agent. Methods never raise; failures are counted in `stats`."""

    def __init__(
        self,
        identity: Identity,
        endpoint: str = DEFAULT_ENDPOINT,
        heartbeat_interval_seconds: float = 1.0,
        start: bool = True,
    ) -> None:
        self.identity = identity
        self.endpoint = endpoint
        self.heartbeat_interval_seconds = max(0.01, float(heartbeat_interval_seconds))
        self.stats = ClientStats()
        self._host, self._port = _split_endpoint(endpoint)
        self._timings: deque[tuple[float, int, str, float]] = deque(maxlen=MAX_QUEUED_TIMINGS)
        self._collectives: dict[str, tuple[float, int, int, int, str | None, int | None]] = {}
        self._step: int | None = None
        self._step_started = 0.0
        self._section: str | None = None
        self._status = "running"
        self._error: dict[str, object] | None = None  # the exception this rank is failing with
        self._started_at = time.time()
        self._checkpoint_step: int | None = None
        self._checkpoint_pending = False
        self._checkpoint_delivered = True
        self._stop_pending = False
        self._stop_delivered = True
        self._on_checkpoint: list[Callable[[], object]] = []
        self._on_stop: list[Callable[[], object]] = []
        self._seen_commands: set[str] = set()
        self._to_ack: set[str] = set()
        self._warned = False
        self._connection: Any = None
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._report_lock = threading.Lock()  # the connection carries one request at a time
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="fleetguard-client", daemon=True)
            self._thread.start()

    # ---- hot path: attribute writes and deque appends only ----

    def step_begin(self, step: int) -> None:
        """A step starts. Pending checkpoint/stop callbacks run here, on the training thread."""
        self._step = step
        self._step_started = time.perf_counter()
        if self._checkpoint_pending and not self._checkpoint_delivered:
            self._deliver_checkpoint()
        if self._stop_pending and not self._stop_delivered:
            self._deliver_stop()

    def step_end(self, step: int) -> None:
        """A step ended: its duration is recorded as section "step"."""
        if self._step == step:
            self._push((time.time(), step, "step", time.perf_counter() - self._step_started))

    def step(self, step: int) -> None:
        """Step boundary in one call: ends the previous step (if one was begun) and begins `step`."""
        if self._step is not None and self._step != step:
            self._push((time.time(), self._step, "step", time.perf_counter() - self._step_started))
        self.step_begin(step)

    def section(self, name: str) -> _Section:
        """`with client.section("compute"):` times a compute section of the current step."""
        return _Section(self, name)

    def collective(
        self,
        process_group: str,
        enqueued: int,
        started: int | None = None,
        completed: int | None = None,
        op: str | None = None,
        size: int | None = None,
    ) -> None:
        """Last collective sequence numbers this rank enqueued / started / completed in `process_group`."""
        self._collectives[process_group] = (
            time.time(),
            enqueued,
            enqueued if started is None else started,
            -1 if completed is None else completed,
            op,
            size,
        )

    @property
    def current_step(self) -> int | None:
        """The step the rank is in (the last `step` or `step_begin`), None before the first."""
        return self._step

    @property
    def queued_timings(self) -> int:
        """Timings measured and not yet reported (bounded by MAX_QUEUED_TIMINGS; older ones are dropped)."""
        return len(self._timings)

    def checkpoint_requested(self) -> bool:
        """True from a checkpoint request until `checkpoint_done` is called."""
        return self._checkpoint_pending

    def stop_requested(self) -> bool:
        return self._stop_pending

    def checkpoint_done(self, step: int) -> None:
        """The latest complete checkpoint is at `step` (restarts resume from it; crash loops
        are judged by it)."""
        self._checkpoint_step = step
        self._checkpoint_pending = False
        self._wake.set()

    def on_checkpoint(self, callback: Callable[[], object]) -> None:
        """Called on the training thread at the next step boundary after a checkpoint request."""
        self._on_checkpoint.append(callback)

    def on_stop(self, callback: Callable[[], object]) -> None:
        """Called on the training thread at the next step boundary after a stop request."""
        self._on_stop.append(callback)

    def close(self, status: str = "finished") -> None:
        """Send a last report with `status` (finished | error) and stop the thread (waits at most ~1 s)."""
        if self._closed.is_set():
            return
        self._status = status
        self._closed.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * REQUEST_TIMEOUT_SECONDS + 0.1)

    def failing(self, error_type: str, message: str, ts: float | None = None) -> None:
        """This rank is ending on an exception: say so at once (status "exiting", with the exception and
        when it was raised), so the agent waits for its exit instead of calling its silence a hang, and can
        tell the rank that failed first from peers that fail because of it."""
        self._error = {
            "ts": time.time() if ts is None else ts,
            "type": error_type[:128] or "Exception",
            "message": message[:1000],
        }
        self._status = "exiting"
        self.report_once()

    def _push(self, item: tuple[float, int, str, float]) -> None:
        queue = self._timings
        if len(queue) == MAX_QUEUED_TIMINGS:
            self.stats.dropped_timings += 1  # the deque drops its oldest entry
        queue.append(item)

    # ---- callbacks (training thread) ----

    def _deliver_checkpoint(self) -> None:
        self._checkpoint_delivered = True
        for callback in self._on_checkpoint:
            _call_quietly(callback, "checkpoint")

    def _deliver_stop(self) -> None:
        self._stop_delivered = True
        for callback in self._on_stop:
            _call_quietly(callback, "stop")

    # ---- background thread ----

    def _run(self) -> None:
        try:
            while True:
                closing = self._closed.is_set()
                try:
                    self.report_once()
                except Exception as exc:  # a bad round must not end the heartbeat: silence reads as a hang
                    self.stats.reports_failed += 1
                    _log().debug("fleetguard report failed: %r", exc)
                if closing:
                    break
                self._wake.wait(self.heartbeat_interval_seconds)
                self._wake.clear()
        except BaseException as exc:  # the thread must never take the process down
            _log().debug("fleetguard client thread ended: %r", exc)
        finally:
            self._disconnect()

    def report_once(self) -> bool:
        """Send one report now (the background thread's unit of work); True when the agent answered.

        Safe to call from any thread: reports go one at a time over the one keep-alive connection."""
        with self._report_lock:
            return self._report_locked()

    def _report_locked(self) -> bool:
        body = self._build_report()
        try:
            response = self._post(body)
        except Exception as exc:
            self.stats.reports_failed += 1
            self._disconnect()
            if not self._warned:
                self._warned = True
                _log().warning(
                    "fleetguard: no agent at %s (%s); training continues, reports are dropped",
                    self.endpoint,
                    exc,
                )
            return False
        self.stats.reports_sent += 1
        self._apply(response)
        return True

    def _build_report(self) -> bytes:
        import json  # lazy: keeps `import fleetguard.client` fast

        timings: list[list[object]] = []
        queue = self._timings
        while queue and len(timings) < MAX_TIMINGS_PER_REPORT:
            ts, step_no, name, duration = queue.popleft()
            timings.append([ts, _int_or(step_no, -1), str(name), duration])
        sent = self.stats.reports_sent + self.stats.reports_failed
        collectives = [
            [
                str(pg),
                ts,
                _int_or(enq, -1),
                _int_or(started, -1),
                _int_or(completed, -1),
                _str_or_none(op),
                _int_or(size, None),
            ]
            for pg, (ts, enq, started, completed, op, size) in list(self._collectives.items())
        ]
        ident = self.identity
        report = {
            "v": PROTOCOL_VERSION,
            "seq": sent,
            "ts": time.time(),
            "job_id": ident.job_id,
            "rank": ident.rank,
            "local_rank": ident.local_rank,
            "world_size": ident.world_size,
            "local_world_size": ident.local_world_size,
            "host": ident.host,
            "pid": ident.pid,
            "step": _int_or(self._step, None),
            "section": _str_or_none(self._section) or ("step" if self._step is not None else None),
            "status": self._status,
            "checkpoint_step": _int_or(self._checkpoint_step, None),
            "timings": timings,
            "collectives": collectives,
            "dropped_timings": self.stats.dropped_timings,
            "acked": self._take_acks(),
        }
        if self._error is not None:
            report["error"] = self._error
        return json.dumps(report, separators=(",", ":")).encode()

    def _take_acks(self) -> list[str]:
        # Sent once; if that report is lost the agent sends the command again and it is acknowledged again.
        acks, self._to_ack = sorted(self._to_ack), set()
        return acks

    def _post(self, body: bytes) -> Any:
        import http.client  # lazy: keeps `import fleetguard.client` fast
        import json

        if self._connection is None:
            self._connection = http.client.HTTPConnection(
                self._host, self._port, timeout=REQUEST_TIMEOUT_SECONDS
            )
        conn = self._connection
        conn.request("POST", REPORT_PATH, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise OSError(f"agent answered HTTP {response.status}")
        return json.loads(data) if data else {}

    def _disconnect(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:
                _log().debug("closing the agent connection: %r", exc)

    def _apply(self, response: Any) -> None:
        commands = response.get("commands", []) if isinstance(response, dict) else []
        for command in commands if isinstance(commands, list) else []:
            if not isinstance(command, dict):
                continue
            command_id = str(command.get("id", ""))
            if command_id:
                self._to_ack.add(command_id)  # acknowledged in the next report; then it is not sent again
            if command_id and command_id in self._seen_commands:
                continue  # a command re-sent after a lost response is applied once
            self._seen_commands.add(command_id)
            self.stats.commands_received += 1
            kind = command.get("kind")
            if kind == "checkpoint":
                self._checkpoint_delivered = False
                self._checkpoint_pending = True
            elif kind == "stop":
                self._stop_delivered = False
                self._stop_pending = True


def _call_quietly(callback: Callable[[], object], what: str) -> None:
    try:
        callback()
    except Exception:
        _log().exception("fleetguard: %s callback failed (training continues)", what)


def _int_or(value: Any, default: int | None) -> int | None:
    """Steps and sequence numbers as plain ints: numpy or torch scalars would stop json, and with it the
    heartbeat (values are converted once a second on the reporter thread, never on the hot path)."""
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _int_env(env: Any, name: str, default: int) -> int:
    try:
        return int(env.get(name, default))
    except (TypeError, ValueError):
        return default


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    text = endpoint.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    text = text.split("/", 1)[0]
    host, _, port = text.rpartition(":")
    try:
        return (host or "127.0.0.1"), int(port)
    except ValueError:
        return text or "127.0.0.1", int(DEFAULT_ENDPOINT.rsplit(":", 1)[1])


# ---- module-level API on one process-wide client ----

_client: Client | None = None
_lock = threading.Lock()
_uncaught_exception = False


def attach(
    job_id: str | None = None,
    endpoint: str | None = None,
    heartbeat_interval_seconds: float = 1.0,
) -> Client:
    """Start reporting for this process (idempotent).

    Endpoint: the argument, else $FLEETGUARD_AGENT_URL, else 127.0.0.1:9477."""
    global _client
    with _lock:
        if _client is None:
            identity = Identity.from_env(job_id)
            chosen = endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
            _client = Client(identity, chosen, heartbeat_interval_seconds)
            import atexit

            sys.excepthook = _noting_uncaught(sys.excepthook)
            atexit.register(_close_at_exit)
        return _client


def _noting_uncaught(previous: Callable[..., object]) -> Callable[..., object]:
    def hook(*args: object) -> object:
        global _uncaught_exception
        _uncaught_exception = True
        client = _client
        if client is not None and len(args) > 1:
            kind, value = args[0], args[1]
            # never in the way of the process's own traceback: an error here is logged and dropped
            _call_quietly(lambda: client.failing(str(getattr(kind, "__name__", "")), str(value)), "failure")
        return previous(*args)

    return hook


def _close_at_exit() -> None:
    # A process ending on an uncaught exception (torchrun's SIGTERM reaches a worker as one) did not finish:
    # it says it is exiting, and the exit code it dies with tells the agent the rest. An exception some
    # framework kept from sys.excepthook may still be in torchelastic's error file (@record writes it).
    client = _client
    if client is not None and not _uncaught_exception:
        error = _torchelastic_error(os.environ.get("TORCHELASTIC_ERROR_FILE"), client._started_at)
        if error is not None:
            client._error, client._status = error, "exiting"
    close("exiting" if _uncaught_exception or (client is not None and client._error) else "finished")


def _torchelastic_error(path: str | None, since: float) -> dict[str, object] | None:
    """The failure torch.distributed.elastic's @record wrote to this worker's error file since `since`:
    {"message": {"message": "ValueError: boom", "extraInfo": {"timestamp": "1700000000", ...}}}."""
    if not path:
        return None
    try:
        import json  # lazy: keeps `import fleetguard.client` fast

        with open(path, "rb") as fh:
            doc = json.loads(fh.read(1 << 16))
        info = doc["message"]
        ts = float(info["extraInfo"]["timestamp"])
        text = str(info["message"])
    except Exception:  # no file, not ours, not that format: nothing to add
        return None
    if ts < int(since):
        return None  # an earlier incarnation's
    kind, _, message = text.partition(": ")
    return {"ts": ts, "type": kind[:128] or "Exception", "message": message[:1000]}


def current() -> Client | None:
    return _client


def close(status: str = "finished") -> None:
    """Say this rank finished (a clean exit is then not a crash) and stop reporting."""
    global _client
    client, _client = _client, None
    if client is not None:
        client.close(status)


def step(step: int) -> None:
    c = _client
    if c is not None:
        c.step(step)


def step_begin(step: int) -> None:
    c = _client
    if c is not None:
        c.step_begin(step)


def step_end(step: int) -> None:
    c = _client
    if c is not None:
        c.step_end(step)


def section(name: str) -> _Section | _NullSection:
    c = _client
    return _NULL_SECTION if c is None else _Section(c, name)


def collective(
    process_group: str,
    enqueued: int,
    started: int | None = None,
    completed: int | None = None,
    op: str | None = None,
    size: int | None = None,
) -> None:
    c = _client
    if c is not None:
        c.collective(process_group, enqueued, started, completed, op, size)


def checkpoint_requested() -> bool:
    c = _client
    return c is not None and c._checkpoint_pending


def stop_requested() -> bool:
    c = _client
    return c is not None and c._stop_pending


def checkpoint_done(step: int) -> None:
    c = _client
    if c is not None:
        c.checkpoint_done(step)


def on_checkpoint(callback: Callable[[], object]) -> None:
    c = _client
    if c is not None:
        c.on_checkpoint(callback)


def on_stop(callback: Callable[[], object]) -> None:
    c = _client
    if c is not None:
        c.on_stop(callback)
