"""Flight-recorder dumps as they appear: the runtime reads each new or rewritten ``nccl_trace_rank_<r>`` file
of a configured directory once, so a hang that made PyTorch dump (TORCH_NCCL_DUMP_ON_TIMEOUT) is localised
from the dumps' collective sequence numbers as well as from the client's reports."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from collectors.flight_recorder import (
    DEFAULT_PREFIX,
    MAX_DUMP_BYTES,
    FlightRecorderError,
    load_dump,
    progress_from_dump,
    rank_from_path,
)
from fleetguard.jobcontrol.trust import job_owner
from fleetguard.records.runtime import CollectiveProgress

log = logging.getLogger(__name__)

MAX_ERRORS = 256


class DumpWatcher:
    """`poll(job_id)` returns the progress records of the dumps written since the watcher started and
    not yet returned; each record's ts is its file's modification time."""

    def __init__(
        self, directory: str | Path, host: str, prefix: str = DEFAULT_PREFIX, max_bytes: int = MAX_DUMP_BYTES
    ) -> None:
        self.directory = Path(directory)
        self.host = host
        self.prefix = prefix
        self.max_bytes = max_bytes
        # file -> why it was skipped (the latest reason), the MAX_ERRORS latest files: a user can create
        # any number of files in a shared directory
        self.errors: dict[str, str] = {}
        # file name -> (mtime_ns, size) when read. Dumps already there belong to earlier jobs: they are
        # remembered, not read, so they cannot be credited to whichever job runs now.
        self._seen: dict[str, tuple[int, int]] = dict(self._versions())

    def _note(self, path: Path, why: str) -> None:
        key = str(path)
        self.errors.pop(key, None)
        while len(self.errors) >= MAX_ERRORS:
            del self.errors[next(iter(self.errors))]
        self.errors[key] = why

    def _versions(self) -> list[tuple[str, tuple[int, int]]]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        out = []
        for name in names:
            with contextlib.suppress(OSError):
                info = os.lstat(self.directory / name)
                out.append((name, (info.st_mtime_ns, info.st_size)))
        return out

    def poll(self, job_id: str) -> list[CollectiveProgress]:
        """New dumps credited to `job_id` (a job key): only files its owner wrote (root's jobs: root's), so
        another local user cannot steer the job's hang localisation with a forged dump."""
        owner, _ = job_owner(job_id)
        try:
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            self.errors[str(self.directory)] = f"cannot list: {exc.strerror or exc}"
            return []
        out: list[CollectiveProgress] = []
        for name in names:
            path = self.directory / name
            rank = rank_from_path(path, self.prefix)
            if rank is None:
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue  # removed between listing and reading
            if not stat.S_ISREG(info.st_mode):
                # a link could point the agent (often root) at a file the dump's writer may not read
                self._note(path, "not a regular file")
                continue
            if owner is not None and info.st_uid != owner:
                # root's jobs too: the directory is often /tmp, and a forged dump steers hang localisation
                self._note(path, f"written by uid {info.st_uid}, not by the job's owner {owner}")
                continue
            version = (info.st_mtime_ns, info.st_size)
            if self._seen.get(name) == version:
                continue
            self._seen[name] = version
            try:
                dump = load_dump(path, self.max_bytes)
            except FlightRecorderError as exc:
                self._note(path, str(exc))
                log.warning("flight-recorder dump skipped: %s", exc)
                continue
            # stamped with when the dump was written: older than a live report, it never overrides one
            written = info.st_mtime_ns / 1e9
            out.extend(progress_from_dump(dump, host=self.host, job_id=job_id, rank=rank, ts=written))
        return out
