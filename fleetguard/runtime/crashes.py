"""The failures of each job's current worker group, gathered until the rank that failed first in its own
right is known (straggler.crash): exceptions ranks report as they fail, and the exits the PID watcher sees.

A worker group's first failure opens a short settle window; the culprit is named at once when some failure
is clearly its rank's own (an exception of its own, SIGKILL), else when the window ends, so the report of a
rank that raised first but exits last still reaches the verdict."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from fleetguard.runtime.protocol import RankError
from straggler.crash import RankFailure, decisive, first_failure

CRASH_SETTLE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Verdict:
    job_id: str
    culprit: RankFailure
    first_exit: RankFailure
    failures: tuple[RankFailure, ...]

    def detail(self) -> dict[str, object]:
        """What joins the culprit's dead_rank evidence."""
        c = self.culprit
        detail: dict[str, object] = {
            "failed_at": c.ts,
            "blame": c.blame.name.lower(),
            "first_exit_rank": self.first_exit.rank,
            "failures": [f.describe() for f in sorted(self.failures, key=lambda f: (f.ts, f.rank))],
        }
        if c.error_type is not None:
            detail["error"] = f"{c.error_type}: {c.message or ''}".strip()
        return detail


@dataclass
class _Group:
    incarnation: int
    errors: dict[int, RankError] = field(default_factory=dict)
    waiting: dict[int, bool] = field(default_factory=dict)  # rank -> inside a collective at its last report
    exits: dict[int, RankFailure] = field(default_factory=dict)
    opened_at: float | None = None  # when its first failing exit was seen
    decided: bool = False

    def failures(self) -> list[RankFailure]:
        out = dict(self.exits)
        for rank, error in self.errors.items():
            known = out.get(rank)
            out[rank] = RankFailure(
                rank,
                min(error.ts, known.ts) if known else error.ts,
                known.exit_code if known else None,
                error.error_type,
                error.message,
                self.waiting.get(rank, False),
            )
        return list(out.values())


class CrashTracker:
    """Thread-safe: reports arrive on HTTP workers, exits on the watcher thread, verdicts on the tick."""

    def __init__(self, settle_seconds: float = CRASH_SETTLE_SECONDS) -> None:
        self.settle_seconds = settle_seconds
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()

    def reported(
        self, job_id: str, incarnation: int, rank: int, error: RankError | None, in_collective: bool
    ) -> None:
        with self._lock:
            group = self._group(job_id, incarnation)
            if group is None:
                return
            group.waiting[rank] = in_collective
            if error is not None:
                group.errors[rank] = error

    def exited(self, job_id: str, incarnation: int, rank: int, exit_code: int | None, now: float) -> bool:
        """A failing exit of the group; False when the group's culprit was already named (collateral)."""
        with self._lock:
            group = self._group(job_id, incarnation)
            if group is None or group.decided:
                return False
            waiting = group.waiting.get(rank, False)
            group.exits[rank] = RankFailure(rank, now, exit_code, in_collective=waiting)
            if group.opened_at is None:
                group.opened_at = now
            return True

    def due(self, now: float) -> list[Verdict]:
        """Groups whose culprit is known now, each once."""
        out: list[Verdict] = []
        with self._lock:
            for job_id, group in self._groups.items():
                if group.decided or group.opened_at is None:
                    continue
                failures = group.failures()
                if decisive(failures) or now - group.opened_at >= self.settle_seconds:
                    group.decided = True
                    first_exit = min(group.exits.values(), key=lambda f: (f.ts, f.rank))
                    out.append(Verdict(job_id, first_failure(failures), first_exit, tuple(failures)))
        return out

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._groups.pop(job_id, None)

    def _group(self, job_id: str, incarnation: int) -> _Group | None:
        """The job's group of this incarnation (a newer one replaces it; an older one is gone: None)."""
        group = self._groups.get(job_id)
        if group is None or group.incarnation < incarnation:
            group = self._groups[job_id] = _Group(incarnation)
        return group if group.incarnation == incarnation else None
