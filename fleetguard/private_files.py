"""Small files the agent keeps for itself (the kernel log's resume point, rows the store refused), written as
root into directories a local user may be able to write (a relative `var/` under someone's directory, a
world-writable one).

- `replace_file` writes a new file under a random name (created exclusively, so a planted link is never
  opened) and renames it over the target: a link planted at the target is replaced, never written through.
- `append_line` opens the target without following a link, refuses anything but a regular file (a FIFO
  would block the agent) and appends.
- `read_own_file` reads a small regular file only when the agent's own user owns it: a file another user
  planted (a kernel-log sequence number that would hide records) is not believed.

Each raises OSError (UnsafeFileError for a file that is there but not to be used) for the caller to count.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


class UnsafeFileError(OSError):
    """A file that exists but is a link, not a regular file, too large, or another user's."""


def replace_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomically make `path` a regular file holding `data` (a link at `path` is replaced, not followed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_line(path: Path, line: str, mode: int = 0o600) -> None:
    """Append `line` (a newline is added) to the regular file `path`, creating it; never through a link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFileError(f"{path} is not a regular file")
        fh.write(line + "\n")


def read_own_file(path: Path, max_bytes: int = 1 << 16) -> bytes:
    """The contents of `path` when it is a regular file of at most `max_bytes` owned by this process's user;
    FileNotFoundError when it is missing, UnsafeFileError when it is not to be believed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):  # ELOOP from O_NOFOLLOW
            raise UnsafeFileError(f"{path} is a symbolic link") from exc
        raise
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{path} is not a regular file")
        if info.st_uid != os.geteuid():
            raise UnsafeFileError(f"{path} belongs to uid {info.st_uid}, not to this agent")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{path} is larger than {max_bytes} bytes")
    return data


def writable_by_others(path: str, opened: os.stat_result) -> str | None:
    """Why another local user could write what `opened` (the fstat of `path`, already open) says, or swap the
    file at `path` for one of their own; None when only root and this process's user can. For a source the
    agent believes as root (the kernel log): what another user writes there would be taken for the host's own
    faults, and a forged fatal XID drains a node."""
    euid = os.geteuid()
    if opened.st_uid not in (0, euid):
        return f"belongs to uid {opened.st_uid}"
    if opened.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by {'others' if opened.st_mode & stat.S_IWOTH else 'its group'}"
    parent = os.path.dirname(os.path.abspath(path))
    try:
        folder = os.stat(parent)
    except OSError as exc:
        return f"sits in {parent}, which cannot be checked ({exc.strerror or exc})"
    if folder.st_uid not in (0, euid):
        return f"sits in {parent}, which belongs to uid {folder.st_uid}"
    # In a sticky folder (/tmp) another user may add names but not rename or remove this user's file.
    if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not folder.st_mode & stat.S_ISVTX:
        return f"sits in {parent}, which other users can write"
    return None
