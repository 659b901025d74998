"""The send order and the backoff both shippers share (fleetguard.shipping.drain), over a real spool."""

from __future__ import annotations

import random
from pathlib import Path

from fleetguard.shipping.drain import BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS, Drain
from fleetguard.shipping.nats_shipper import NATS_BACKOFF_CAP_SECONDS
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import encode
from tests.controller.helpers import batch


def spool_of(tmp_path: Path, n: int) -> Spool:
    spool = Spool(tmp_path / "spool", 1 << 20)
    for seq in range(1, n + 1):
        spool.append(encode(batch("node-a", seq)))
    return spool


def test_the_newest_batch_goes_first_then_the_backlog_oldest_first(tmp_path: Path) -> None:
    spool = spool_of(tmp_path, 3)
    drain = Drain(spool, random.Random(1))
    first = drain.next_record()
    assert first is not None and first.record_id == spool.newest().record_id  # type: ignore[union-attr]
    second = drain.next_record()
    assert second is not None and second.record_id == spool.oldest().record_id  # type: ignore[union-attr]
    spool.append(encode(batch("node-a", 4)))  # live data arrives while the backlog drains: it goes next
    third = drain.next_record()
    assert third is not None and third.record_id == spool.newest().record_id  # type: ignore[union-attr]


def test_after_the_far_end_was_unreachable_live_data_goes_first_again(tmp_path: Path) -> None:
    spool = spool_of(tmp_path, 3)
    drain = Drain(spool, random.Random(1))
    newest = drain.next_record()
    assert drain.next_record() != newest  # the backlog's turn
    drain.unreachable()
    assert drain.next_record() == newest


def test_backoff_doubles_to_the_cap_with_equal_jitter(tmp_path: Path) -> None:
    drain = Drain(spool_of(tmp_path, 1), random.Random(7))
    for n in range(1, 41):
        ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**n)
        delay = drain.failed()
        # Equal jitter: never below half the ceiling (full jitter would go down to 0), never above it.
        assert ceiling / 2 <= delay <= ceiling, (n, delay)
    assert drain.failures == 40


def test_a_success_starts_the_backoff_over(tmp_path: Path) -> None:
    drain = Drain(spool_of(tmp_path, 1), random.Random(3))
    for _ in range(10):
        drain.failed()
    drain.succeeded()
    assert drain.failures == 0
    assert drain.failed() <= BACKOFF_BASE_SECONDS * 2


def test_a_transport_of_its_own_cap_never_waits_past_it(tmp_path: Path) -> None:
    """The NATS shipper's cap (JetStream, not a controller, takes its retries) is shorter than HTTP's."""
    assert NATS_BACKOFF_CAP_SECONDS < BACKOFF_CAP_SECONDS
    drain = Drain(spool_of(tmp_path, 1), random.Random(7), NATS_BACKOFF_CAP_SECONDS)
    delays = [drain.failed() for _ in range(40)]
    assert max(delays) <= NATS_BACKOFF_CAP_SECONDS and min(delays[10:]) >= NATS_BACKOFF_CAP_SECONDS / 2
