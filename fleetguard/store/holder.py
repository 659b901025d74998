"""Who holds a store: the process that opened it for writing leaves `<store>.holder.json` beside it (its kind,
pid and, for `fleetguard controller` and `up`, the URL of its read API) and removes it when it closes.

DuckDB has one writer; an operator's command that finds the store locked reads this file to say which
process holds it and to ask that process instead (its read API), rather than tell the operator to stop the
fleet's only writer. The file is believed only when it is a regular file owned by root or by the reader,
writable by its owner alone, and its pid is alive: a planted file must not send an operator's token
elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from fleetguard.private_files import replace_file

MAX_BYTES = 4096


class HolderKind(StrEnum):
    CONTROLLER = "controller"  # `fleetguard controller`
    UP = "up"  # `fleetguard up`
    AGENT = "agent"  # `fleetguard agent` keeping a local store (serves no read API)


_COMMAND = {
    HolderKind.CONTROLLER: "`fleetguard controller`",
    HolderKind.UP: "`fleetguard up`",
    HolderKind.AGENT: "`fleetguard agent`",
}


@dataclass(frozen=True, slots=True)
class Holder:
    kind: HolderKind
    pid: int
    url: str  # its read API ("" for an agent)

    def describe(self) -> str:
        where = f" serving {self.url}" if self.url else ""
        return f"a running {_COMMAND[self.kind]} (pid {self.pid}{where})"


def holder_path(store_path: str) -> Path:
    return Path(store_path + ".holder.json")


def announce(store_path: str, kind: HolderKind, url: str = "") -> None:
    """Say that this process holds the store (call after opening it for writing; `withdraw` when closing)."""
    if store_path == ":memory:":
        return
    doc = {"kind": kind.value, "pid": os.getpid(), "url": url}
    # Readable by operators who are not this process's user: it holds no secret, only where to ask.
    replace_file(holder_path(store_path), json.dumps(doc).encode(), mode=0o644)


def withdraw(store_path: str) -> None:
    if store_path == ":memory:":
        return
    path = holder_path(store_path)
    with contextlib.suppress(OSError):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and _mine(path):
            path.unlink()


def _mine(path: Path) -> bool:
    held = read_holder_file(path)
    return held is not None and held.pid == os.getpid()


def read_holder(store_path: str) -> Holder | None:
    """The process that says it holds the store, or None (no file, a file not to be believed, a dead pid)."""
    if store_path == ":memory:":
        return None
    held = read_holder_file(holder_path(store_path))
    if held is None or not _alive(held.pid):
        return None
    return held


def read_holder_file(path: Path) -> Holder | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        trusted_owner = info.st_uid in (0, os.geteuid())
        if not stat.S_ISREG(info.st_mode) or not trusted_owner or info.st_mode & 0o022:
            return None
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return None
    try:
        doc = json.loads(data)
        kind, pid, url = HolderKind(doc["kind"]), doc["pid"], doc["url"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not 0 < pid < 1 << 22 or not isinstance(url, str):
        return None
    if url and not url.startswith(("http://", "https://")):
        return None
    return Holder(kind, pid, url[:512])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's (root's) process: alive
    return True
