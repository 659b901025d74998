"""The shipper against a real controller on loopback: deleted once committed, kept while refused or down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetguard.shipping.shipper import Shipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import encode
from tests.controller.helpers import Controller, batch, metric_value, start_test_controller


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path / "controller")
    yield c
    c.running.stop()


def _drain(shipper: Shipper, spool: Spool, max_sends: int = 50) -> list[float]:
    delays = []
    for _ in range(max_sends):
        record = shipper.drain.next_record()
        if record is None:
            break
        delays.append(shipper.send(record))
    return delays


def test_committed_batches_leave_the_spool_and_are_stored_once(
    controller: Controller, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    for seq in (1, 2, 3):
        spool.append(encode(batch("node-a", seq)))
    shipper = Shipper(spool, controller.url, controller.tokens["node-a"], clock=time.monotonic)
    _drain(shipper, spool)
    assert spool.pending() == 0
    assert shipper.stats.committed == 3
    assert metric_value(controller.metrics(), "fleetguard_controller_batches_committed_total") == 3


def test_the_newest_batch_goes_first_then_the_backlog_oldest_first(
    controller: Controller, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    ids = [spool.append(encode(batch("node-a", seq))) for seq in (1, 2, 3, 4)]
    shipper = Shipper(spool, controller.url, controller.tokens["node-a"], clock=time.monotonic)
    order = []
    while (record := shipper.drain.next_record()) is not None:
        order.append(record.record_id)
        shipper.send(record)
    assert order == [ids[3], ids[0], ids[1], ids[2]]


def test_a_wrong_token_keeps_the_batch_and_waits(controller: Controller, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    spool.append(encode(batch("node-a", 1)))
    shipper = Shipper(spool, controller.url, "wrong", clock=time.monotonic)
    record = shipper.drain.next_record()
    assert record is not None
    assert shipper.send(record) >= 10
    assert spool.pending() == 1
    assert shipper.stats.refused == {401: 1}


def test_a_batch_refused_for_its_content_is_dropped_and_counted(
    controller: Controller, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    bad = batch("node-a", 1)
    bad.tables["gpu_samples"]["gpu_index"][0] = 2**63
    spool.append(encode(bad))
    spool.append(encode(batch("node-a", 2)))
    shipper = Shipper(spool, controller.url, controller.tokens["node-a"], clock=time.monotonic)
    _drain(shipper, spool)
    assert spool.pending() == 0
    assert (shipper.stats.dropped_refused, shipper.stats.committed) == (1, 1)


def test_an_unreachable_controller_backs_off_with_growing_jittered_delays(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    spool.append(encode(batch("node-a", 1)))
    shipper = Shipper(spool, "http://127.0.0.1:9", "t", clock=time.monotonic)  # discard port: refused
    record = spool.oldest()
    assert record is not None
    delays = [shipper.send(record) for _ in range(6)]
    assert spool.pending() == 1
    assert shipper.stats.errors == 6
    assert delays[-1] > delays[0]
    assert all(d <= 30.0 for d in delays)


def test_a_resent_batch_after_a_lost_reply_is_acked_as_duplicate(
    controller: Controller, tmp_path: Path
) -> None:
    b = batch("node-a", 1)
    controller.ship(b)  # committed, but suppose the reply never reached the agent
    spool = Spool(tmp_path / "spool", 1 << 20)
    spool.append(encode(b))
    shipper = Shipper(spool, controller.url, controller.tokens["node-a"], clock=time.monotonic)
    _drain(shipper, spool)
    assert spool.pending() == 0
    assert shipper.stats.duplicates == 1
