"""Per-host bearer tokens: the controller keeps only their SHA-256, in a 0600 JSON file.

A token is 32 random bytes (urlsafe base64). The controller hashes what a request presents and looks the hash
up: a lookup by hash reveals nothing about any stored token's text; the host comparison after it is
constant-time. The file is re-read when it changes, so `fleetguard controller token` takes effect without a
restart.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from diagnosis.rules_events import reserved_host_name
from fleetguard import secret_files

FILE_VERSION = 1
MAX_FILE_BYTES = 64 << 20  # ~300,000 tokens; a file past this is not one `controller token` wrote
KEY = "controller.tokens_file"
# A known token looks at the tokens file again at most this often (`TokenBook.identify`).
RECHECK_SECONDS = 1.0
OPERATOR = "*"  # the "host" of an operator token: may read everything and queue commands, never ingest


class Role(StrEnum):
    AGENT = "agent"
    OPERATOR = "operator"


class TokenFileError(Exception):
    """The tokens file cannot be read or written; one line naming the file."""


@dataclass(frozen=True)
class Identity:
    host: str
    role: Role


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _read_text(path: Path) -> str:
    """The file's text, through the project's one secret-file reader: a regular file reached through no
    symbolic link, owned by this user (or root), closed to other users. Whoever can write the tokens file can
    mint a token for any host, so a planted link or a file other users can open is refused, not believed."""
    try:
        data = secret_files.read_secret_bytes(KEY, path, MAX_FILE_BYTES)
    except secret_files.SecretFileError as exc:
        raise TokenFileError(str(exc)) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenFileError(f"{KEY}: {path} is not UTF-8 text") from exc


def _read(path: Path) -> list[dict[str, object]]:
    if not os.path.lexists(path):
        return []
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TokenFileError(f"tokens file {path}: cannot be read: {exc}") from exc
    if (
        not isinstance(doc, dict)
        or doc.get("version") != FILE_VERSION
        or not isinstance(doc.get("tokens"), list)
    ):
        raise TokenFileError(f"tokens file {path}: not a fleetguard tokens file (version {FILE_VERSION})")
    entries = [e for e in doc["tokens"] if isinstance(e, dict)]
    for e in entries:
        if not isinstance(e.get("host"), str) or not isinstance(e.get("sha256"), str):
            raise TokenFileError(f"tokens file {path}: an entry without host and sha256")
        if e.get("role", Role.AGENT.value) not in {r.value for r in Role}:
            raise TokenFileError(f"tokens file {path}: unknown role {e.get('role')!r}")
    return entries


def add_token(path: Path, host: str, role: Role = Role.AGENT, *, replace: bool = False) -> str:
    """Make a token for `host`, store its hash in `path` (created 0600), return the token (shown once).

    `replace` drops the host's earlier tokens (rotation); otherwise they stay valid beside the new one."""
    _check_host(host, role)
    entries = [e for e in _read(path) if not (replace and e.get("host") == host)]
    token = new_token()
    entries.append({"host": host, "role": role.value, "sha256": hash_token(token), "created_ts": time.time()})
    _write(path, {"version": FILE_VERSION, "tokens": entries})
    return token


def _check_host(host: str, role: Role) -> None:
    if not host or len(host) > 256 or not host.isprintable():
        raise TokenFileError(f"host {host[:64]!r}: expected 1-256 printable characters")
    reserved = reserved_host_name(host) if role is Role.AGENT else None
    if reserved is not None:  # its batches would be refused (validate.check_batch): refuse the token first
        raise TokenFileError(reserved)


def add_tokens(path: Path, hosts: list[str]) -> dict[str, str]:
    """Tokens for many hosts in one write (provisioning a fleet, benchmarks); host -> token."""
    for host in hosts:
        _check_host(host, Role.AGENT)
    entries = _read(path)
    tokens = {host: new_token() for host in hosts}
    now = time.time()
    entries += [
        {"host": h, "role": Role.AGENT.value, "sha256": hash_token(t), "created_ts": now}
        for h, t in tokens.items()
    ]
    _write(path, {"version": FILE_VERSION, "tokens": entries})
    return tokens


def _write(path: Path, doc: dict[str, object]) -> None:
    """Write atomically (a new 0600 file renamed over the old), so a reader never sees half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
    except OSError as exc:
        raise TokenFileError(f"tokens file {path}: cannot be written: {exc}") from exc


class TokenBook:
    """The controller's view of the tokens file; `identify` is safe from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._by_hash: dict[str, Identity] = {}
        self._recheck_at = 0.0  # monotonic: when a known token next makes `identify` look at the file
        self.reload()

    def reload(self) -> None:
        try:
            st = self.path.lstat()  # ctime too: a chmod or chown alone is a change to check
            stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_size)
        except FileNotFoundError:
            stamp = None
        # Unchanged (every request but one after an edit): no lock, which every handler thread would take in
        # turn. The stamp and the map are each replaced whole under the lock, never changed in place.
        if stamp == self._stamp and self._by_hash:
            return
        with self._lock:
            if stamp == self._stamp and self._by_hash:
                return
            entries = _read(self.path)
            self._by_hash = {
                str(e["sha256"]): Identity(str(e["host"]), Role(str(e.get("role", Role.AGENT.value))))
                for e in entries
            }
            self._stamp = stamp

    def known(self, authorization: str | None) -> Identity | None:
        """The identity of a token read already, when the file needs no look now; else None: ask `identify`
        on a thread that may block. Never a system call and never the lock (which a reload of a large file
        holds): for the server's loop thread, where a wait stalls every connection."""
        digest = _digest(authorization)
        if digest is None or time.monotonic() >= self._recheck_at:
            return None
        return self._by_hash.get(digest)

    def identify(self, authorization: str | None) -> Identity | None:
        """The identity an `Authorization: Bearer <token>` header proves, or None."""
        digest = _digest(authorization)
        if digest is None:
            return None
        identity = self._by_hash.get(digest)  # replaced whole on a reload, never changed in place: no lock
        # The file is looked at again for a token not known (a new one works at once) and otherwise at most
        # every RECHECK_SECONDS: an lstat per request was a system call, and so a hand-over of the
        # interpreter's lock, on the ingest loop for every batch. A revoked token stops within that second.
        if identity is None or time.monotonic() >= self._recheck_at:
            # On a damaged file keep the tokens read last (a failed rotation must not lock every agent out).
            with contextlib.suppress(TokenFileError):
                self.reload()
            # Moved on only once the look is done: while a large file is read, `known` still says "look",
            # so no token it revokes is taken meanwhile.
            self._recheck_at = time.monotonic() + RECHECK_SECONDS
            identity = self._by_hash.get(digest)
        return identity


def _digest(authorization: str | None) -> str | None:
    """The hash of the bearer token an Authorization header carries; None if it carries none."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    return hash_token(token.strip())
