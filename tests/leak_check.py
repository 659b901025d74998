"""The suite's leak check: hooks that fail a test leaving threads or processes behind (see tests/conftest.py
for what it asks of a test). Imported by tests/conftest.py, which re-exports the hooks."""

from __future__ import annotations

import _posixsubprocess
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

# Long enough for a thread told to stop to notice and exit, short enough that a real leak costs little.
LEAK_GRACE_S = 2.0
_POLL_S = 0.02
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(eq=False)
class _Owner:
    """Who is accountable for what starts while it is current: a test, or a wider-scoped fixture."""

    label: str
    threads: weakref.WeakSet[threading.Thread] = field(default_factory=weakref.WeakSet)
    processes: set[_ProcId] = field(default_factory=set)


@dataclass(frozen=True)
class _ProcId:
    """A process by pid and start time, so a reused pid is not mistaken for the process it replaced."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class _ProcInfo:
    ident: _ProcId
    ppid: int
    state: str
    comm: str


@dataclass(frozen=True)
class _Origin:
    owner_label: str
    where: str


# Threads a library starts once per process and never stops; a name prefix and why it is allowed.
_ALLOWED_THREADS: tuple[tuple[str, str], ...] = (
    (
        "Dask-Offload",
        "distributed.utils._offload_executor: a module-level one-thread pool, shut down only at exit",
    ),
)

# Processes a library starts once per process and never stops; a command-line fragment and why.
_ALLOWED_PROCESSES: tuple[tuple[str, str], ...] = (
    (
        "from multiprocessing.resource_tracker import main",
        "multiprocessing's resource tracker: one per process, started on first use, ends when pytest exits",
    ),
)

# Frames that only pass a Thread.start call along: the threading module, this file, pytest and pluggy.
_NOT_CALLERS = (threading.__file__, __file__, "/_pytest/", "/pluggy/")

_origins: weakref.WeakKeyDictionary[threading.Thread, _Origin] = weakref.WeakKeyDictionary()
_thread_owners: weakref.WeakKeyDictionary[threading.Thread, _Owner] = weakref.WeakKeyDictionary()
_owner_stack: list[_Owner] = []
_fixture_owners: dict[int, _Owner] = {}  # id(FixtureDef) -> owner, while that fixture is set up
_finalized: list[_Owner] = []  # fixtures torn down since the last check
_baselines: dict[str, tuple[set[threading.Thread], set[_ProcId]]] = {}
_original_start: Callable[[threading.Thread], None] = threading.Thread.start


def _caller_summary(frame: FrameType | None, depth: int = 6) -> str:
    """A few frames of where Thread.start was called from, skipping the threading module's own frames."""
    parts: list[str] = []
    while frame is not None and len(parts) < depth:
        code = frame.f_code
        if not any(skip in code.co_filename for skip in _NOT_CALLERS):
            parts.append(f"{_short_path(code.co_filename)}:{frame.f_lineno} in {code.co_name}")
        frame = frame.f_back
    return " <- ".join(parts) or "unknown"


def _short_path(path: str) -> str:
    if "/site-packages/" in path:
        return path.split("/site-packages/", 1)[1]
    stdlib = re.search(r"/lib/python3\.\d+/", path)
    if stdlib:
        return path[stdlib.end() :]
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _recording_start(self: threading.Thread) -> None:
    # A thread started by another thread (a server's pool worker, started by its loop) belongs to whoever
    # owns that thread, as a child process belongs to its parent's owner; one started on the main thread
    # belongs to the test or fixture running there.
    owner = _thread_owners.get(threading.current_thread())
    if owner is None:
        owner = _owner_stack[-1] if _owner_stack else None
    _origins[self] = _Origin(owner.label if owner else "outside any test", _caller_summary(sys._getframe(1)))
    if owner is not None:
        owner.threads.add(self)
        _thread_owners[self] = owner
    _original_start(self)


threading.Thread.start = _recording_start  # type: ignore[method-assign]

# Pids this process started itself. Being a subreaper, pytest also adopts the orphans of its children's
# children; one that has exited (a zombie) is reaped quietly, as init would have, while a zombie of a child
# pytest started itself means the test never waited for it.
_spawned: set[int] = set()
_original_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
_original_fork = os.fork
_original_fork_exec: Callable[..., int] = _posixsubprocess.fork_exec


def _recording_execute_child(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    _original_execute_child(self, *args, **kwargs)
    _spawned.add(self.pid)


def _recording_fork() -> int:
    pid = _original_fork()
    if pid:
        _spawned.add(pid)
    return pid


def _recording_fork_exec(*args: Any, **kwargs: Any) -> int:
    pid: int = _original_fork_exec(*args, **kwargs)
    _spawned.add(pid)
    return pid


subprocess.Popen._execute_child = _recording_execute_child  # type: ignore[attr-defined]
os.fork = _recording_fork
# multiprocessing's spawn and forkserver start processes through this, not through Popen.
_posixsubprocess.fork_exec = _recording_fork_exec


def _read_proc(pid: str) -> _ProcInfo | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2 :].split()
    return _ProcInfo(_ProcId(int(pid), int(rest[19])), int(rest[1]), rest[0], comm)


def _children(pid: int) -> list[int]:
    """Children of every thread of `pid` (a child belongs to the thread that forked it)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            found.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return found


def _children_by_scan() -> dict[int, list[int]]:
    """Every process's children, from a scan of all of /proc (where the kernel has no children files)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        info = _read_proc(name) if name.isdigit() else None
        if info is not None:
            children.setdefault(info.ppid, []).append(info.ident.pid)
    return children


# Reading each descendant's children is far cheaper than reading every process's stat, per test.
_HAS_CHILDREN_FILES = Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/children").exists()


def _descendants() -> dict[_ProcId, _ProcInfo]:
    """Every process whose ancestry leads to this one."""
    scanned = None if _HAS_CHILDREN_FILES else _children_by_scan()
    found: dict[_ProcId, _ProcInfo] = {}
    todo = [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid in _children(parent) if scanned is None else scanned.get(parent, []):
            info = _read_proc(str(pid))
            if info is not None and info.ident not in found:
                found[info.ident] = info
                todo.append(pid)
    return found


def _cmdline(info: _ProcInfo) -> str:
    try:
        raw = Path(f"/proc/{info.ident.pid}/cmdline").read_bytes()
    except OSError:
        raw = b""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{info.comm}]"


def _thread_allowed(thread: threading.Thread) -> bool:
    return thread is threading.main_thread() or any(thread.name.startswith(p) for p, _ in _ALLOWED_THREADS)


def _process_allowed(info: _ProcInfo) -> bool:
    cmdline = _cmdline(info)
    return any(fragment in cmdline for fragment, _ in _ALLOWED_PROCESSES)


def _held_by_live_fixtures() -> tuple[set[threading.Thread], set[_ProcId]]:
    threads: set[threading.Thread] = set()
    procs: set[_ProcId] = set()
    for owner in _fixture_owners.values():
        threads.update(owner.threads)
        procs.update(owner.processes)
    return threads, procs


def _adopt_into_fixture(proc: _ProcId, found: dict[_ProcId, _ProcInfo]) -> bool:
    """A process that a wider-scoped fixture's process started (a browser's renderer) is that fixture's,
    checked when it is torn down; True when `proc` is, or now counts as, a live fixture's."""
    by_pid = {i.pid: i for i in found}
    chain: list[_ProcId] = []
    current: _ProcId | None = proc
    while current is not None:
        for owner in _fixture_owners.values():
            if current in owner.processes:
                owner.processes.update(chain)
                return True
        chain.append(current)
        parent = by_pid.get(found[current].ppid)
        current = parent if parent in found else None
    return False


def _wait_for_threads(threads: set[threading.Thread], deadline: float) -> list[threading.Thread]:
    for thread in threads:
        if not isinstance(thread, threading._DummyThread):  # a foreign thread cannot be joined
            thread.join(max(0.0, deadline - time.monotonic()))
    return sorted((t for t in threads if t.is_alive()), key=lambda t: t.name)


def _reap_adopted_zombies(found: dict[_ProcId, _ProcInfo]) -> dict[_ProcId, _ProcInfo]:
    """Reap orphans pytest adopted that have exited; return what is left."""
    me = os.getpid()
    for ident, info in list(found.items()):
        if info.state == "Z" and info.ppid == me and ident.pid not in _spawned:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(ident.pid, os.WNOHANG)
            del found[ident]
    return found


def _wait_for_processes(procs: set[_ProcId], deadline: float) -> list[_ProcInfo]:
    while True:
        alive = {k: v for k, v in _reap_adopted_zombies(_descendants()).items() if k in procs}
        # A zombie whose parent is pytest never goes by itself; anything else may still be exiting.
        finishing = [i for i in alive.values() if not (i.state == "Z" and i.ppid == os.getpid())]
        if not finishing or time.monotonic() >= deadline:
            return sorted(alive.values(), key=lambda i: i.ident.pid)
        time.sleep(_POLL_S)


def _describe_thread(thread: threading.Thread) -> str:
    origin = _origins.get(thread)
    if origin is None:
        return f"thread {thread.name!r} (daemon={thread.daemon}) not started via Thread.start"
    started = f"started by {origin.owner_label} at {origin.where}"
    return f"thread {thread.name!r} (daemon={thread.daemon}) {started}"


def _describe_process(info: _ProcInfo) -> str:
    state = {"T": "STOPPED (send SIGCONT, kill, wait)", "t": "traced", "Z": "zombie (never waited for)"}
    described = f"{info.state} {state.get(info.state, '')}".rstrip()
    return f"process {info.ident.pid} state {described}: {_cmdline(info)}"


def _kill_and_reap(leaked: list[_ProcInfo]) -> None:
    """Stop leaked processes from spilling into later tests: kill them and reap those that are ours."""
    for info in leaked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.ident.pid, signal.SIGKILL)
    deadline = time.monotonic() + LEAK_GRACE_S
    pending = {i.ident.pid for i in leaked}
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child (its own parent reaps it) or reaped already
                done = pid
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(_POLL_S)


def _leak_report(nodeid: str) -> str | None:
    """Compare with the test's baseline, after its teardown; None when it left nothing behind."""
    base_threads, base_procs = _baselines.pop(nodeid, (set(), set()))
    held_threads, _ = _held_by_live_fixtures()
    finished_fixtures, _finalized[:] = list(_finalized), []
    threads = {t for t in threading.enumerate() if t not in base_threads and t not in held_threads}
    found = _descendants()
    procs = {p for p in found if p not in base_procs and not _adopt_into_fixture(p, found)}
    for owner in finished_fixtures:
        threads.update(t for t in owner.threads if t.is_alive())
        procs.update(owner.processes)
    threads = {t for t in threads if not _thread_allowed(t)}
    deadline = time.monotonic() + LEAK_GRACE_S
    leaked_threads = _wait_for_threads(threads, deadline)
    leaked_procs = [i for i in _wait_for_processes(procs, deadline) if not _process_allowed(i)]
    if not leaked_threads and not leaked_procs:
        return None
    lines = [_describe_thread(t) for t in leaked_threads] + [_describe_process(i) for i in leaked_procs]
    _kill_and_reap(leaked_procs)
    return (
        f"leak check: {nodeid} (or a fixture it tore down) left {len(leaked_threads)} thread(s) and "
        f"{len(leaked_procs)} process(es) behind {LEAK_GRACE_S:g} s after teardown; stop/join/reap what you "
        "start (see tests/conftest.py):\n  " + "\n  ".join(lines)
    )


def pytest_configure(config: pytest.Config) -> None:
    # Orphaned grandchildren are re-parented to pytest instead of init, so a daemonised process a test left
    # behind is still found (and reaped) here.
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[Any]:
    if fixturedef.scope == "function":
        return (yield)
    owner = _Owner(f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope)")
    before = set(_descendants())
    _owner_stack.append(owner)
    try:
        return (yield)
    finally:
        _owner_stack.remove(owner)
        _, held_procs = _held_by_live_fixtures()
        owner.processes = set(_descendants()) - before - held_procs
        _fixture_owners[id(fixturedef)] = owner


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    owner = _fixture_owners.pop(id(fixturedef), None)
    if owner is not None:
        _finalized.append(owner)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _baselines[item.nodeid] = (set(threading.enumerate()), set(_descendants()))
    _owner_stack.append(_Owner(f"test {item.nodeid}"))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        result = yield
    except BaseException as exc:
        report = _end_of_test(item)
        if report:
            exc.add_note(report)
        raise
    report = _end_of_test(item)
    if report:
        pytest.fail(report, pytrace=False)
    return result


def _end_of_test(item: pytest.Item) -> str | None:
    _owner_stack[:] = [o for o in _owner_stack if o.label != f"test {item.nodeid}"]
    report = _leak_report(item.nodeid)
    # Forget pids that are gone, so a reused pid is not taken for a child pytest started itself.
    _spawned.intersection_update(p.pid for p in _descendants())
    return report
