"""The one reader of every secret the project keeps in a file: webhook secrets and routing keys, the
controller's tokens file, the agent's controller token, NATS passwords and creds, the operator token, the
controller's TLS key.

Whoever can plant or change such a file can make this process send its content somewhere (a symbolic link
to a root-only file becomes a PagerDuty routing key) or mint themselves an identity, and whoever can read it
can act as us. So a secret file is believed only when it is:
- reached without following a symbolic link at its last component (O_NOFOLLOW: a link is refused, not read),
- a regular file (a FIFO would block the reader),
- owned by this process's user or by root (another user's file is theirs to change),
- closed to group and other (no permission bits past 0700: readable by others means known to others),
- no larger than the caller's bound.
Every check runs on the opened descriptor (fstat), so the file checked is the file read.

A refusal is a `SecretFileError` whose text is one line naming the configuration key, the path, what is wrong
and the command that fixes it, e.g.
`alerts.webhooks[0].secret_file: /x is readable by others (mode 0644); chmod 600 /x`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

DEFAULT_MAX_BYTES = 64 << 10


class SecretFileError(Exception):
    """A secret file that is missing, unreadable or not to be trusted; one line naming the key and the fix."""


def open_secret_file(key: str, path: str | Path) -> int:
    """A read-only descriptor on `path` after every check above; the caller closes it."""
    if not str(path):
        raise SecretFileError(f"{key}: no file given")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SecretFileError(_open_failure(key, path, exc)) from exc
    try:
        _check(key, path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_secret_bytes(key: str, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The whole content of the checked file; refused past `max_bytes`."""
    fd = open_secret_file(key, path)
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise SecretFileError(f"{key}: {path} cannot be read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise SecretFileError(f"{key}: {path} is larger than {max_bytes} bytes; is it the right file?")
    return data


def read_secret_text(key: str, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The checked file's text, stripped: printable ASCII (plus line breaks) and not empty."""
    data = read_secret_bytes(key, path, max_bytes)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise SecretFileError(f"{key}: {path} is not ASCII text") from exc
    if not text:
        raise SecretFileError(f"{key}: {path} is empty")
    if not all(line.isprintable() for line in text.splitlines()):
        raise SecretFileError(f"{key}: {path} holds control characters")
    return text


def _open_failure(key: str, path: str | Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return f"{key}: {path} is a symbolic link; refused (point {key} at the file itself)"
    if exc.errno == errno.ENOENT:
        return f"{key}: {path} does not exist"
    if exc.errno == errno.EACCES:
        return f"{key}: {path} cannot be read by uid {os.geteuid()} (permission denied)"
    return f"{key}: {path} cannot be opened: {exc.strerror or exc}"


def _check(key: str, path: str | Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(f"{key}: {path} is not a regular file")
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        raise SecretFileError(
            f"{key}: {path} belongs to uid {info.st_uid}, not to this user (uid {me}) or root; "
            f"chown {me} {path}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        what = "readable" if mode & 0o044 else "writable" if mode & 0o022 else "executable"
        raise SecretFileError(f"{key}: {path} is {what} by others (mode {mode:04o}); chmod 600 {path}")
