"""A bounded, cached scan of the flight-recorder dump directory.

The directory is often world-writable (/tmp): 200,000 files in it made every tick's full listing take 3.3 s.
So the listing is incremental: a pass reads at most `max_entries` directory entries per call and resumes on
the next, and a new pass starts only when the directory's mtime changed since the last one began (or was
too close to it to be sure). Between passes only the files already known for the job's owner are looked at
again (a dump rewritten in place does not change the directory). At most `max_files_per_owner` dump files
are tracked per owner uid, so one user's flood cannot crowd out another's dumps or grow the agent's memory.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, NamedTuple, Protocol

MAX_ENTRIES_PER_SCAN: Final = 1024  # directory entries read per call (a tick): an lstat at most each
MAX_FILES_PER_OWNER: Final = 1024  # dump files tracked per uid (a host runs far fewer ranks)
MAX_OWNERS: Final = 256  # uids tracked; a dump of one more is skipped as over the cap
# A change within this long of a pass's start may carry the same mtime as the one that pass saw (coarse
# file-system clocks): the next call lists again rather than trust the cache.
RACY_SECONDS: Final = 2.0


class DumpFile(NamedTuple):  # a tuple: one is made for every dump-named entry of a flood
    name: str
    rank: int
    uid: int
    regular: bool
    version: tuple[int, int]  # (mtime_ns, size): a new version is a new dump
    over_cap: bool = False  # its owner already has max_files_per_owner tracked: not to be read


_Marker = tuple[int, int, int]  # the directory's (st_dev, st_ino, st_mtime_ns)


class _Listing(Iterator[os.DirEntry[str]], Protocol):
    """What os.scandir returns: entries, and a close() that frees the directory handle."""

    def close(self) -> None: ...


class DumpDirScanner:
    """`scan()` returns the dump files met this call; `restat(uid)` the current state of uid's known ones."""

    def __init__(
        self,
        directory: str | Path,
        prefix: str,
        max_entries: int = MAX_ENTRIES_PER_SCAN,
        max_files_per_owner: int = MAX_FILES_PER_OWNER,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.directory = Path(directory)
        self.prefix = prefix
        self._pattern = re.compile(re.escape(prefix) + r"(\d{1,9})")  # as collectors' rank_from_path
        self.max_entries = max_entries
        self.max_files_per_owner = max_files_per_owner
        self._clock_ns = clock_ns
        self.listings = 0  # passes started (each a full listing, spread over calls)
        self.passes_completed = 0
        self.entries_read = 0
        self.error: str | None = None  # why the directory cannot be listed, while it cannot
        self._entries: _Listing | None = None
        self._pass_marker: _Marker | None = None
        self._pass_started_ns = 0
        self._done: tuple[_Marker, int] | None = None  # the last completed pass: its marker and start
        self._owned: dict[int, dict[str, int]] = {}  # uid -> name -> rank, as tracked
        self._met: set[tuple[int, str]] = set()  # (uid, name) met by the pass in progress

    def scan(self) -> list[DumpFile]:
        if self._entries is None and not self._start_pass():
            return []
        assert self._entries is not None
        found: list[DumpFile] = []
        for _ in range(self.max_entries):
            entry = next(self._entries, None)
            if entry is None:
                self._finish_pass()
                break
            self.entries_read += 1
            seen = self._file(entry.name, entry)
            if seen is not None:
                found.append(seen)
        return found

    def restat(self, uid: int | None) -> list[DumpFile]:
        """uid's tracked files as they are now (None: any owner's, at most max_files_per_owner of them)."""
        if uid is None:
            names = [n for owned in self._owned.values() for n in owned][: self.max_files_per_owner]
        else:
            names = list(self._owned.get(uid, ()))
        out = []
        for name in names:
            seen = self._file(name)
            if seen is not None and (uid is None or seen.uid == uid):
                out.append(seen)
        return out

    def close(self) -> None:
        self._close_entries()

    def _start_pass(self) -> bool:
        try:
            info = os.stat(self.directory)
        except OSError as exc:
            self.error = f"cannot list: {exc.strerror or exc}"
            return False
        marker = (info.st_dev, info.st_ino, info.st_mtime_ns)
        if self._done is not None:
            done_marker, done_started_ns = self._done
            racy = done_started_ns - done_marker[2] < RACY_SECONDS * 1e9
            if marker == done_marker and not racy:
                return False  # nothing added or removed since the last full listing
        try:
            self._entries = os.scandir(self.directory)
        except OSError as exc:
            self.error = f"cannot list: {exc.strerror or exc}"
            return False
        self.error = None
        self.listings += 1
        self._pass_marker = marker
        self._pass_started_ns = self._clock_ns()
        self._met = set()
        return True

    def _finish_pass(self) -> None:
        self._close_entries()
        assert self._pass_marker is not None
        self._done = (self._pass_marker, self._pass_started_ns)
        self.passes_completed += 1
        # files gone since: forgotten, so their owner's share is free again
        for uid in list(self._owned):
            names = {n: r for n, r in self._owned[uid].items() if (uid, n) in self._met}
            if names:
                self._owned[uid] = names
            else:
                del self._owned[uid]
        self._met = set()

    def _close_entries(self) -> None:
        entries, self._entries = self._entries, None
        if entries is not None:
            entries.close()

    def _file(self, name: str, entry: os.DirEntry[str] | None = None) -> DumpFile | None:
        match = self._pattern.fullmatch(name)
        if match is None:
            return None
        rank = int(match.group(1))
        try:
            # the entry's own lstat joins its path in C: this runs for every dump-named entry of a flood
            info = entry.stat(follow_symlinks=False) if entry is not None else os.lstat(self.directory / name)
        except OSError:
            return None  # removed between listing and looking
        version = (info.st_mtime_ns, info.st_size)
        regular = stat.S_ISREG(info.st_mode)
        tracked = self._track(info.st_uid, name, rank)
        return DumpFile(name, rank, info.st_uid, regular, version, over_cap=not tracked)

    def _track(self, uid: int, name: str, rank: int) -> bool:
        names = self._owned.get(uid)
        if names is None:
            if len(self._owned) >= MAX_OWNERS:
                return False
            names = self._owned[uid] = {}
        if name not in names and len(names) >= self.max_files_per_owner:
            return False
        names[name] = rank
        self._met.add((uid, name))  # only tracked files: the set is bounded as `_owned` is
        return True
