"""Commands waiting for local ranks (checkpoint, stop), delivered at least once: each reply to a rank's report
carries its commands until a later report acknowledges their ids (a reply lost on the way, e.g. a client
timeout, would otherwise lose a checkpoint request; the client applies each id once)."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

COMMAND_KINDS = frozenset({"checkpoint", "stop"})


@dataclass(frozen=True, slots=True)
class Command:
    command_id: str
    kind: str  # checkpoint | stop
    reason: str = ""

    def to_json(self) -> dict[str, str]:
        return {"id": self.command_id, "kind": self.kind, "reason": self.reason}


class CommandQueue:
    """Per (job, rank) queues. A command stays queued until the rank acknowledges it."""

    def __init__(self) -> None:
        self._queues: defaultdict[tuple[str, int], list[Command]] = defaultdict(list)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def push(self, job_id: str, ranks: list[int], kind: str, reason: str = "") -> Command:
        """Queue the same command (one id) for each of `ranks` of `job_id`."""
        if kind not in COMMAND_KINDS:
            raise ValueError(f"unknown command kind {kind!r}; expected one of {sorted(COMMAND_KINDS)}")
        with self._lock:
            command = Command(f"{kind}:{next(self._ids)}", kind, reason)
            for rank in ranks:
                self._queues[(job_id, rank)].append(command)
        return command

    def take(self, job_id: str, rank: int, acked: Iterable[str] = ()) -> list[Command]:
        """Drop what the rank acknowledged; the rest is (re)sent with this reply."""
        done = set(acked)
        with self._lock:
            queue = [c for c in self._queues.get((job_id, rank), []) if c.command_id not in done]
            if queue:
                self._queues[(job_id, rank)] = queue
            else:
                self._queues.pop((job_id, rank), None)
            return list(queue)

    def discard(self, job_id: str, kind: str) -> int:
        """Drop every queued command of `kind` for the job's ranks; returns how many were dropped."""
        dropped = 0
        with self._lock:
            for key in [k for k in self._queues if k[0] == job_id]:
                kept = [c for c in self._queues[key] if c.kind != kind]
                dropped += len(self._queues[key]) - len(kept)
                if kept:
                    self._queues[key] = kept
                else:
                    del self._queues[key]
        return dropped

    def forget(self, job_id: str) -> None:
        """Drop every command queued for the job's ranks (the job is gone)."""
        with self._lock:
            for key in [k for k in self._queues if k[0] == job_id]:
                del self._queues[key]

    def pending(self, job_id: str, rank: int) -> list[Command]:
        with self._lock:
            return list(self._queues.get((job_id, rank), []))
