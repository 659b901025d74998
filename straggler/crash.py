"""Which rank failed first in its own right when a worker group crashes.

When one rank fails, its peers fail too within moments: a gloo or NCCL collective sees its connection close,
the launcher SIGTERMs the rest, a rank blocked inside a collective errors out. The first process to exit is
often one of those. Each failure is judged from what is known about it (the exception the rank reported,
with its time, torchelastic's error file, its exit code, whether it was waiting in a collective) and the
culprit is the earliest failure in its own right. Pure logic over plain values.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from straggler.heartbeat import TERMINATION_EXIT_CODES

# Errors a rank raises because a peer went away (lower case, matched as substrings). A rank whose own work
# failed raises something else first; these follow it on every other rank.
PEER_ERROR_MARKERS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote process exited",
    "communicator was aborted",
    "ncclremoteerror",
    "socket timeout",
    "connection refused",
    "timed out waiting",
    "watchdog caught collective operation timeout",
    "process group has been destroyed",
    "signal 15",
    "sigterm",
)


class Blame(enum.IntEnum):
    """How much a failure says about its own rank (higher: more its own)."""

    COLLATERAL = 0  # a peer's failure reached it, or it was torn down
    UNKNOWN = 1  # a plain non-zero exit with nothing else known
    OWN = 2  # its own exception, or a signal nobody sends in a teardown (SIGKILL, SIGSEGV, SIGABRT ...)


@dataclass(frozen=True, slots=True)
class RankFailure:
    rank: int
    ts: float  # when it failed: its exception's time where reported, else when its exit was seen
    exit_code: int | None = None  # None: not exited (yet), or unknown
    error_type: str | None = None  # the exception it reported, e.g. "ValueError"
    message: str | None = None
    # its last report had a collective enqueued and not completed: with no error of its own to go by, it
    # was waiting for a peer
    in_collective: bool = False

    @property
    def blame(self) -> Blame:
        if self.error_type is not None or self.message is not None:
            text = f"{self.error_type or ''}: {self.message or ''}".lower()
            return Blame.COLLATERAL if any(marker in text for marker in PEER_ERROR_MARKERS) else Blame.OWN
        if self.exit_code in TERMINATION_EXIT_CODES:
            return Blame.COLLATERAL
        if self.exit_code is not None and self.exit_code < 0:
            return Blame.OWN  # a signal no teardown sends (OOM killer, segfault, abort), wherever it was
        return Blame.COLLATERAL if self.in_collective else Blame.UNKNOWN

    def describe(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "ts": self.ts,
            "exit_code": self.exit_code,
            "error_type": self.error_type,
            "message": self.message,
            "in_collective": self.in_collective,
            "blame": self.blame.name.lower(),
        }


def first_failure(failures: Sequence[RankFailure]) -> RankFailure:
    """The culprit: the earliest failure of the most self-inflicted kind (own, else unknown, else
    collateral). `failures` must not be empty."""
    most = max(f.blame for f in failures)
    return min((f for f in failures if f.blame == most), key=lambda f: (f.ts, f.rank))


def decisive(failures: Sequence[RankFailure]) -> bool:
    """True when the culprit is already certain: some failure is the rank's own. Otherwise a moment more may
    bring the report of the rank that really failed (its peers can exit before it)."""
    return any(f.blame == Blame.OWN for f in failures)
