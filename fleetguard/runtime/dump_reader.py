"""Flight-recorder dumps read off the agent's tick: one worker thread runs one bounded child at a time
(`fleetguard.runtime.dump_child`) and the tick picks up what is done.

The tick only queues a file (at most `max_pending` wait; more are refused and tried again on a later tick).
The worker opens it without following a link, checks it is a regular file of the expected owner and size,
and passes the open descriptor to the child, which caps its own memory and CPU; the worker kills it at the
wall-clock limit. What comes back is a small JSON summary, checked again before it becomes records.
"""

from __future__ import annotations

import collections
import logging
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from collectors.flight_recorder import MAX_DUMP_BYTES
from fleetguard.records.runtime import CollectiveProgress
from fleetguard.runtime.dump_child import (
    DumpRefusal,
    SummaryError,
    progress_from_summary,
    reader_uid_of,
    refusal_of,
)

log = logging.getLogger(__name__)

CHILD_MODULE: Final = "fleetguard.runtime.dump_child"
_POLL_SECONDS: Final = 0.1  # how often a waiting worker looks at its stop flag
NOGROUP: Final = 65534
_PACKAGE_ROOT: Final = str(Path(__file__).resolve().parents[2])  # where `fleetguard` and `collectors` live


@dataclass(frozen=True)
class DumpLimits:
    max_bytes: int = MAX_DUMP_BYTES
    # A real dump (2,000 entries) unpickles in well under a second and a few tens of MB; these leave it ample
    # room while a hostile one is cut off long before it costs the host anything.
    memory_bytes: int = 512 * 1024 * 1024
    cpu_seconds: int = 20
    wall_seconds: float = 30.0


@dataclass(frozen=True)
class DumpRequest:
    """One file to read, credited (if it reads) to `job_id`'s `rank` on `host`."""

    path: Path
    host: str
    job_id: str
    rank: int
    owner: int | None  # the uid the file must belong to; None: any


@dataclass
class DumpOutcome:
    request: DumpRequest
    progress: list[CollectiveProgress] = field(default_factory=list)
    refusal: DumpRefusal | None = None
    message: str = ""
    problems: Counter[str] = field(default_factory=Counter)
    reader_uid: int | None = None  # the uid the child that read it ran as


def read_dump_isolated(
    request: DumpRequest, limits: DumpLimits, stop: threading.Event | None = None
) -> DumpOutcome:
    """Read one dump in a bounded child; never raises for anything the file holds."""
    try:
        fd = os.open(request.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return _refused(request, DumpRefusal.NOT_REGULAR, f"cannot open: {exc.strerror or exc}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _refused(request, DumpRefusal.NOT_REGULAR, "not a regular file")
        if request.owner is not None and info.st_uid != request.owner:
            why = f"written by uid {info.st_uid}, not by the job's owner {request.owner}"
            return _refused(request, DumpRefusal.WRONG_OWNER, why)
        if info.st_size > limits.max_bytes:
            why = f"{info.st_size} bytes, over the {limits.max_bytes}-byte limit for a dump"
            return _refused(request, DumpRefusal.TOO_LARGE, why)
        # stamped with when the dump was written: older than a live report, it never overrides one
        return _run_child(request, fd, info.st_mtime_ns / 1e9, limits, stop or threading.Event(), info.st_uid)
    finally:
        os.close(fd)


def _child_identity(writer_uid: int) -> tuple[int, int] | None:
    """(uid, gid) the child drops to: a root agent reads a user's dump as that user, so a flaw in the
    unpickler that the dump's bytes could exploit gains its writer nothing; None: run as the agent."""
    if os.geteuid() != 0 or writer_uid == 0:
        return None
    try:
        gid = pwd.getpwuid(writer_uid).pw_gid
    except KeyError:
        gid = NOGROUP  # a uid without a passwd entry (a container's): no group of anyone's
    return writer_uid, gid


def _spawn(
    argv: list[str], fd: int, env: dict[str, str], identity: tuple[int, int] | None
) -> subprocess.Popen[bytes]:
    """Start the child on `fd` (its stdin: it needs no right to the file's path), as `identity` where the
    interpreter may be run by that user, else as the agent (said once)."""
    global _warned_no_drop
    try:
        return subprocess.Popen(
            argv,
            stdin=fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env=env,
            close_fds=True,
            user=identity[0] if identity else None,
            group=identity[1] if identity else None,
            extra_groups=[] if identity else None,
        )
    except PermissionError as exc:
        if identity is None:
            raise
        if not _warned_no_drop:
            _warned_no_drop = True
            log.warning(
                "flight-recorder dumps are read as the agent, not their writers: uid %d cannot run %s (%s)",
                identity[0],
                argv[0],
                exc.strerror or exc,
            )
        return _spawn(argv, fd, env, None)


_warned_no_drop = False


def _run_child(
    request: DumpRequest,
    fd: int,
    written: float,
    limits: DumpLimits,
    stop: threading.Event,
    writer_uid: int,
) -> DumpOutcome:
    argv = [
        sys.executable,
        "-s",  # no user site-packages: the child runs as the agent (often root)
        "-m",
        CHILD_MODULE,
        f"--max-bytes={limits.max_bytes}",
        f"--memory-bytes={limits.memory_bytes}",
        f"--cpu-seconds={limits.cpu_seconds}",
    ]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": _PACKAGE_ROOT, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        child = _spawn(argv, fd, env, _child_identity(writer_uid))
    except OSError as exc:
        return _refused(request, DumpRefusal.CHILD_FAILED, f"cannot start the reader: {exc}")
    deadline = time.monotonic() + limits.wall_seconds
    while True:
        try:
            out, err = child.communicate(timeout=_POLL_SECONDS)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline and not stop.is_set():
                continue
            child.kill()
            child.communicate()
            return _refused(request, DumpRefusal.TIMEOUT, f"not read within {limits.wall_seconds:g} s")
    return _outcome(request, child.returncode, out, err, written, limits)


def _outcome(
    request: DumpRequest, code: int, out: bytes, err: bytes, written: float, limits: DumpLimits
) -> DumpOutcome:
    if code in (-9, -24):  # SIGKILL, SIGXCPU: the kernel's answers to RLIMIT_CPU
        return _refused(request, DumpRefusal.CPU_LIMIT, f"over the {limits.cpu_seconds} s CPU limit")
    if code != 0:
        if b"MemoryError" in err:
            why = f"over the {limits.memory_bytes}-byte memory limit"
            return _refused(request, DumpRefusal.MEMORY_LIMIT, why)
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {code}"]
        return _refused(request, DumpRefusal.CHILD_FAILED, tail[0][:400])
    refused = refusal_of(out)
    if refused is not None:
        return _refused(request, *refused)
    outcome = DumpOutcome(request, reader_uid=reader_uid_of(out))
    try:
        outcome.progress = progress_from_summary(
            out,
            host=request.host,
            job_id=request.job_id,
            rank=request.rank,
            ts=written,
            problems=outcome.problems,
        )
    except SummaryError as exc:
        return _refused(request, DumpRefusal.CHILD_FAILED, str(exc))
    return outcome


def _refused(request: DumpRequest, reason: DumpRefusal, message: str) -> DumpOutcome:
    return DumpOutcome(request, refusal=reason, message=f"{request.path}: {message}")


class DumpReader:
    """`submit` queues a file (False when `max_pending` already wait); `take` returns what is done."""

    def __init__(self, limits: DumpLimits | None = None, max_pending: int = 16) -> None:
        self.limits = limits or DumpLimits()
        self.max_pending = max_pending
        self._pending: collections.deque[DumpRequest] = collections.deque()
        self._done: list[DumpOutcome] = []
        self._busy = False
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, request: DumpRequest) -> bool:
        with self._cond:
            if self._stop.is_set() or len(self._pending) >= self.max_pending:
                return False
            self._pending.append(request)
            if self._thread is None:  # started on first use: most agents never see a dump
                self._thread = threading.Thread(target=self._run, name="fleetguard-dump-reader", daemon=True)
                self._thread.start()
            self._cond.notify()
        return True

    def take(self) -> list[DumpOutcome]:
        with self._cond:
            done, self._done = self._done, []
        return done

    def busy(self) -> bool:
        """Whether a dump is queued or being read."""
        with self._cond:
            return self._busy or bool(self._pending)

    def wait_idle(self, timeout_seconds: float) -> bool:
        """Wait until nothing is queued or being read (tests, shutdown); whether that happened in time."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._busy or self._pending), timeout_seconds)

    def close(self) -> None:
        """Drop what waits, kill a child being run, end the worker."""
        with self._cond:
            self._stop.set()
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=self.limits.wall_seconds + 5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop.is_set() or bool(self._pending))
                if self._stop.is_set():
                    return
                request = self._pending.popleft()
                self._busy = True
            try:
                outcome = read_dump_isolated(request, self.limits, self._stop)
            except Exception as exc:  # a bug here must not end the reader: later dumps still count
                log.exception("flight-recorder dump %s: reading failed", request.path)
                outcome = _refused(request, DumpRefusal.CHILD_FAILED, f"{type(exc).__name__}: {exc}")
            with self._cond:
                self._busy = False
                self._done.append(outcome)
                self._cond.notify_all()
            if outcome.refusal is not None:
                log.warning("flight-recorder dump skipped: %s", outcome.message)
