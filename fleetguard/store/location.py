"""Where a store may be written. The agent runs as root; DuckDB opens the database file and its `.wal`
through any symbolic link it finds there, so a local user who can create files in the store's directory (a
relative `var/` under their directory, a world-writable one) could plant a link and have root write into any
file. A store is therefore written only where no other user can plant one."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeStoreLocation(Exception):
    """The store's directory or file could be replaced by another user; the message names it and why."""


def check_store_location(path: Path) -> None:
    """Refuse to write the store at `path` when another user could put a link in its place: its directory
    is another user's or writable by others, a directory above it could be renamed by another user (owned by
    one, or writable by others without the sticky bit, as OpenSSH's StrictModes checks), or the database
    file or its write-ahead log already is a link."""
    path = path.absolute()
    me = os.geteuid()
    directory = path.parent
    st = os.stat(directory)
    if st.st_uid not in (me, 0):
        raise UnsafeStoreLocation(
            f"store directory {directory} belongs to uid {st.st_uid}: another user could plant links there"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeStoreLocation(
            f"store directory {directory} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}): "
            "use a directory only this user can write"
        )
    check_parents(directory, "store directory")
    for candidate in (path, path.with_name(path.name + ".wal")):
        if candidate.is_symlink():
            raise UnsafeStoreLocation(
                f"store file {candidate} is a symbolic link: refusing to write through it"
            )


def check_parents(directory: Path, what: str) -> None:
    """Refuse `directory` when a directory above it could be renamed by another user (owned by one, or
    writable by others without the sticky bit, as OpenSSH's StrictModes checks): they could swap the whole
    tree for one of theirs. `what` names the setting in the one-line message. The one check for every
    directory root writes (the store's, the agent's spool)."""
    directory = directory.absolute()
    me = os.geteuid()
    for ancestor in directory.parents:
        st = os.stat(ancestor)
        shared = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX
        if st.st_uid not in (me, 0) or shared:
            raise UnsafeStoreLocation(
                f"{what} {directory}: {ancestor} above it can be changed by another user "
                f"(uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})"
            )
