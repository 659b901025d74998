"""Flight-recorder dumps as they appear: the runtime reads each new or rewritten ``nccl_trace_rank_<r>`` file
of a configured directory once, so a hang that made PyTorch dump (TORCH_NCCL_DUMP_ON_TIMEOUT) is localised
from the dumps' collective sequence numbers as well as from the client's reports.

Nothing here parses a dump or lists a whole directory on the caller's (the analysis tick's) thread: the
directory is scanned incrementally (`dump_scan`) and each dump is read by a bounded child on the reader's
worker (`dump_reader`); `poll` queues what is new and returns what has been read since the last call."""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path

from collectors.flight_recorder import DEFAULT_PREFIX, MAX_DUMP_BYTES
from fleetguard.jobcontrol.trust import job_owner
from fleetguard.records.runtime import CollectiveProgress
from fleetguard.runtime.dump_child import DumpRefusal
from fleetguard.runtime.dump_reader import DumpLimits, DumpOutcome, DumpReader, DumpRequest
from fleetguard.runtime.dump_scan import MAX_ENTRIES_PER_SCAN, MAX_FILES_PER_OWNER, DumpDirScanner, DumpFile

log = logging.getLogger(__name__)

MAX_ERRORS = 256


class DumpWatcher:
    """`poll(job_id)` queues the dumps written since the watcher started and not yet read, and returns the
    progress records of those read since the last poll; each record's ts is its file's modification time.
    `close()` ends the reader (and a child it runs)."""

    def __init__(
        self,
        directory: str | Path,
        host: str,
        prefix: str = DEFAULT_PREFIX,
        max_bytes: int = MAX_DUMP_BYTES,
        limits: DumpLimits | None = None,
        max_entries_per_poll: int = MAX_ENTRIES_PER_SCAN,
        max_files_per_owner: int = MAX_FILES_PER_OWNER,
    ) -> None:
        self.directory = Path(directory)
        self.host = host
        self.prefix = prefix
        self.limits = limits or DumpLimits(max_bytes=max_bytes)
        # file -> why it was skipped (the latest reason), the MAX_ERRORS latest files: a user can create
        # any number of files in a shared directory
        self.errors: dict[str, str] = {}
        self.refused: Counter[DumpRefusal] = Counter()  # dump versions not read, by reason
        self.problems: Counter[str] = Counter()  # values skipped inside dumps that were read
        self.scanner = DumpDirScanner(self.directory, prefix, max_entries_per_poll, max_files_per_owner)
        self.reader = DumpReader(self.limits)
        # file name -> (mtime_ns, size) when queued. Dumps already there belong to earlier jobs: they are
        # remembered, not read, so they cannot be credited to whichever job runs now. A directory too large
        # to list in one call finishes its first pass on later polls: what that pass meets written before
        # the watcher started is remembered the same way.
        # Kept per owner uid, each at most the files the scanner tracks for it: one user's flood can never
        # push out what another's dumps were, which would have them read (and credited) twice.
        self._seen: dict[int, dict[str, tuple[int, int]]] = {}
        self._started_ns = time.time_ns()
        for file in self.scanner.scan():
            self._remember(file)

    def poll(self, job_id: str) -> list[CollectiveProgress]:
        """New dumps credited to `job_id` (a job key): only files its owner wrote (root's jobs: root's), so
        another local user cannot steer the job's hang localisation with a forged dump."""
        owner, _ = job_owner(job_id)
        files = self.scanner.scan()
        if self.scanner.error is not None:
            self.errors[str(self.directory)] = self.scanner.error
        for file in [*files, *self.scanner.restat(owner)]:
            self._consider(file, job_id, owner)
        return self._collect(self.reader.take())

    def wait_idle(self, timeout_seconds: float) -> bool:
        """Wait until every queued dump has been read (tests); whether that happened in time."""
        return self.reader.wait_idle(timeout_seconds)

    def close(self) -> None:
        self.reader.close()
        self.scanner.close()

    def _consider(self, file: DumpFile, job_id: str, owner: int | None) -> None:
        if self._seen.get(file.uid, {}).get(file.name) == file.version:
            return
        path = os.path.join(self.directory, file.name)
        if self.scanner.passes_completed == 0 and file.version[0] < self._started_ns:
            self._remember(file)  # met late by the first pass: an earlier job's
            return
        if not file.regular:
            # a link could point the agent (often root) at a file the dump's writer may not read
            self._refuse(file, DumpRefusal.NOT_REGULAR, f"{path}: not a regular file")
        elif file.over_cap:
            why = f"{path}: uid {file.uid} has more than {self.scanner.max_files_per_owner} dump files"
            self._refuse(file, DumpRefusal.OWNER_CAP, why)
        elif owner is not None and file.uid != owner:
            # root's jobs too: the directory is often /tmp, and a forged dump steers hang localisation
            why = f"{path}: written by uid {file.uid}, not by the job's owner {owner}"
            self._refuse(file, DumpRefusal.WRONG_OWNER, why)
        elif self.reader.submit(DumpRequest(Path(path), self.host, job_id, file.rank, owner)):
            self._remember(file)
        else:
            self.refused[DumpRefusal.QUEUE_FULL] += 1  # not remembered: queued again on a later poll

    def _refuse(self, file: DumpFile, reason: DumpRefusal, why: str) -> None:
        self._remember(file)  # counted once per version (over the cap: once per listing), not per poll
        self.refused[reason] += 1
        self._note(os.path.join(self.directory, file.name), why)

    def _collect(self, outcomes: list[DumpOutcome]) -> list[CollectiveProgress]:
        out: list[CollectiveProgress] = []
        for outcome in outcomes:
            if outcome.refusal is not None:
                self.refused[outcome.refusal] += 1
                self._note(str(outcome.request.path), outcome.message)
                continue
            self.problems.update(outcome.problems)
            out.extend(outcome.progress)
        return out

    def _remember(self, file: DumpFile) -> None:
        if file.over_cap:
            return  # not tracked by the scanner (so met again only at its next listing): not kept either
        seen = self._seen.setdefault(file.uid, {})
        seen.pop(file.name, None)
        while len(seen) >= self.scanner.max_files_per_owner:
            del seen[next(iter(seen))]
        seen[file.name] = file.version

    def _note(self, key: str, why: str) -> None:
        self.errors.pop(key, None)
        while len(self.errors) >= MAX_ERRORS:
            del self.errors[next(iter(self.errors))]
        self.errors[key] = why
