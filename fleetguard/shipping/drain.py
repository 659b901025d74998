"""What the two shippers (HTTP, NATS) decide the same way: which spooled batch goes next, and how long to wait
after a failure. The transports differ only in how a batch is sent and how they wait between sends."""

from __future__ import annotations

import random

from fleetguard.shipping.spool import Spool, SpoolRecord

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0
_MAX_DOUBLINGS = 16  # 2**16 * base is far past the cap; the bound keeps the float finite for ever


class Drain:
    """The send order and the failure backoff of one shipper over its spool.

    Order: the newest batch first whenever one is new since the last send (live data is never stuck behind a
    backlog), otherwise the oldest (the backlog drains between live batches).

    Backoff: exponential and capped, with *equal* jitter: after the n-th failure in a row the wait is uniform
    in [c/2, c] for c = min(cap, base * 2**n). The jitter spreads a fleet that lost its controller together;
    the half that is not random keeps a host from retrying at once.
    """

    def __init__(self, spool: Spool, rng: random.Random, cap_seconds: float = BACKOFF_CAP_SECONDS) -> None:
        self.spool = spool
        self.rng = rng
        self.cap_seconds = cap_seconds
        self.failures = 0  # in a row; 0 after a success
        self._last_newest = 0

    def next_record(self) -> SpoolRecord | None:
        newest = self.spool.newest()
        if newest is not None and newest.record_id > self._last_newest:
            self._last_newest = newest.record_id
            return newest
        return self.spool.oldest()

    def failed(self) -> float:
        """Count a failure; the seconds to wait before the next try."""
        self.failures += 1
        ceiling = min(self.cap_seconds, BACKOFF_BASE_SECONDS * 2 ** min(self.failures, _MAX_DOUBLINGS))
        return self.rng.uniform(ceiling / 2, ceiling)

    def unreachable(self) -> float:
        """A failure to reach the far end at all: once it answers again, live data goes first."""
        self._last_newest = 0
        return self.failed()

    def succeeded(self) -> None:
        self.failures = 0
