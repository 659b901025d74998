"""The one drain loop both shippers run (fleetguard.shipping.drain_loop), over a real spool, with the
transport as its parameter: a batch leaves the spool only once the transport returned (stored), or when it
can never be stored; every other outcome keeps it. The HTTP and NATS transports are tested against a real
controller and a real nats-server (test_shipper.py, tests/scale/test_nats_shipper.py)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.shipping.drain import BACKOFF_CAP_SECONDS
from fleetguard.shipping.drain_loop import DrainLoop, ShipperStats
from fleetguard.shipping.errors import BatchRefused, RetryLater, SendFailed, TransportDown
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import encode
from tests.controller.helpers import batch


class ScriptedTransport:
    """Answers each send with the next outcome of its script (None: stored); remembers what it was sent."""

    def __init__(self, *outcomes: Exception | None, down: TransportDown | None = None) -> None:
        self.outcomes = list(outcomes)
        self.down = down
        self.sent: list[bytes] = []
        self.closed = 0
        self.stored = threading.Event()

    def prepare(self) -> None:
        if self.down is not None:
            raise self.down

    def send(self, body: bytes) -> None:
        self.sent.append(body)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        self.stored.set()

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Spool]:
    s = Spool(tmp_path / "spool", 1 << 20)
    yield s
    s.close()


def loop_over(spool: Spool, transport: ScriptedTransport) -> DrainLoop:
    return DrainLoop(
        spool,
        transport,
        ShipperStats(),
        clock=time.monotonic,
        rng=random.Random(7),
        thread_name="test-drain-loop",
        join_seconds=5.0,
    )


def test_a_stored_batch_leaves_the_spool_and_is_counted(spool: Spool) -> None:
    spool.append(encode(batch("node-a", 1)))
    transport = ScriptedTransport(None)
    loop = loop_over(spool, transport)
    assert loop.step() == 0.0
    assert spool.pending() == 0 and loop.stats.committed == 1 and loop.stats.last_success_ts > 0
    assert loop.step() is None  # nothing left: idle


@pytest.mark.parametrize(
    "failure",
    [
        TransportDown("far end unreachable"),
        SendFailed("answered 500"),
        RetryLater("busy", 12.5),
        RuntimeError("a bug in the transport"),
    ],
)
def test_a_batch_not_stored_stays_spooled(spool: Spool, failure: Exception) -> None:
    spool.append(encode(batch("node-a", 1)))
    transport = ScriptedTransport(failure)
    loop = loop_over(spool, transport)
    delay = loop.step()
    assert spool.pending() == 1 and loop.stats.committed == 0
    assert delay is not None and delay > 0
    if isinstance(failure, RetryLater):
        assert delay == 12.5 and loop.drain.failures == 0  # the far end said how long: no backoff
    else:
        assert loop.drain.failures == 1
    assert loop.stats.errors == (1 if isinstance(failure, TransportDown) else 0)
    assert transport.closed == (1 if isinstance(failure, RuntimeError) else 0)
    assert loop.step() == 0.0 and spool.pending() == 0  # sent again, stored, gone
    assert transport.sent[0] == transport.sent[1]


def test_a_batch_that_can_never_be_stored_is_dropped_and_counted(spool: Spool) -> None:
    spool.append(encode(batch("node-a", 1)))
    spool.append(encode(batch("node-a", 2)))
    transport = ScriptedTransport(BatchRefused("too large"), None)
    loop = loop_over(spool, transport)
    assert loop.step() == 0.0 and loop.step() == 0.0
    assert spool.pending() == 0
    assert (loop.stats.dropped_refused, loop.stats.committed) == (1, 1)


def test_a_transport_that_cannot_open_keeps_everything_and_backs_off(spool: Spool) -> None:
    spool.append(encode(batch("node-a", 1)))
    transport = ScriptedTransport(down=TransportDown("no server", said=True))
    loop = loop_over(spool, transport)
    delays = [loop.step() for _ in range(8)]
    assert transport.sent == [] and spool.pending() == 1 and loop.stats.errors == 8
    assert all(d is not None and 0 < d <= BACKOFF_CAP_SECONDS for d in delays)
    assert delays[-1] > delays[0]  # type: ignore[operator]


def test_the_thread_ships_what_is_woken_and_stops_with_a_final_drain(spool: Spool) -> None:
    transport = ScriptedTransport()
    loop = loop_over(spool, transport)
    loop.start()
    try:
        spool.append(encode(batch("node-a", 1)))
        loop.wake()
        assert transport.stored.wait(10), "the woken loop never sent the new batch"
        spool.append(encode(batch("node-a", 2)))
    finally:
        loop.stop(drain_seconds=5.0)  # what was spooled at stop is sent before the thread ends
    assert spool.pending() == 0 and loop.stats.committed == 2
    assert transport.closed == 1  # the transport is closed at stop


class RecoveringTransport(ScriptedTransport):
    """Down until `recover()`: a controller killed and started again."""

    def __init__(self) -> None:
        super().__init__(down=TransportDown("controller down", said=True))
        self.tried_down = threading.Event()

    def prepare(self) -> None:
        if self.down is not None:
            self.tried_down.set()
        super().prepare()

    def recover(self) -> None:
        self.down = None


def backing_off(spool: Spool, batches: int) -> tuple[DrainLoop, RecoveringTransport]:
    """A started loop over `batches` spooled batches whose far end is down, past its first try and deep in a
    backoff (after that failure the wait is 15-30 s)."""
    transport = RecoveringTransport()
    loop = loop_over(spool, transport)
    loop.drain.failures = 10
    for seq in range(1, batches + 1):
        spool.append(encode(batch("node-a", seq)))
    loop.start()
    assert transport.tried_down.wait(10), "the loop never tried the far end"
    return loop, transport


def test_a_stop_during_a_backoff_tries_again_and_sends_what_the_returned_far_end_takes(spool: Spool) -> None:
    loop, transport = backing_off(spool, 6)
    try:
        transport.recover()  # back, while this loop sleeps its backoff
    finally:
        loop.stop(drain_seconds=5.0)
    # All sent within a 5 s drain: it did not sleep out its 15-30 s backoff first.
    assert spool.pending() == 0 and loop.stats.committed == 6


def test_a_stop_whose_final_try_fails_keeps_the_backlog_and_does_not_wait_out_the_drain(spool: Spool) -> None:
    transport = ScriptedTransport(down=TransportDown("controller down", said=True))
    loop = loop_over(spool, transport)
    loop.drain.failures = 10  # its backoff after the next failure is 15-30 s
    for seq in range(1, 4):
        spool.append(encode(batch("node-a", seq)))
    loop.start()
    deadline = time.monotonic() + 10
    while loop.stats.errors == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # until it failed once and sleeps its backoff
    errors = loop.stats.errors
    # An hour's drain: a stop that waited for its deadline instead of giving up at the first failure would
    # run into the suite's timeout.
    loop.stop(drain_seconds=3600.0)
    assert loop.stats.errors == errors + 1  # exactly one final try
    assert spool.pending() == 3 and loop.stats.committed == 0


def test_resume_ends_a_backoff_in_progress_and_the_backlog_is_sent_without_a_stop(spool: Spool) -> None:
    """A NATS client that reconnected says so (`resume`): the loop sends at once instead of sleeping out a
    backoff its failures during the outage built up."""
    loop, transport = backing_off(spool, 3)
    try:
        transport.recover()
        loop.resume()
        # Well inside the 15 s the backoff would have lasted at the least.
        assert transport.stored.wait(10), "the backlog waited out the backoff"
    finally:
        loop.stop()
    assert loop.stats.committed >= 1


def test_without_resume_a_backoff_is_not_cut_short_by_new_batches(spool: Spool) -> None:
    loop, transport = backing_off(spool, 1)
    try:
        transport.recover()
        spool.append(encode(batch("node-a", 2)))
        loop.wake()  # a flush: not a reason to retry a far end that failed
        assert not transport.stored.wait(1)  # woken at once, and still in its 15-30 s backoff
    finally:
        loop.stop()
    assert spool.pending() == 2
