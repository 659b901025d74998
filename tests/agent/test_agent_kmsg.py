"""The agent and the kernel-log collector together: a kernel record counts as handled once its event is
stored, so a crash while the store fails loses no XID (a file stands in for /dev/kmsg)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from collectors.kmsg import KmsgCollector
from fleetguard.agent.agent import Agent
from fleetguard.agent.buffer import WriteBuffer
from fleetguard.agent.metrics import MetricsState
from fleetguard.clock import FakeClock
from fleetguard.store import Store

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kmsg"
BOOT = 1_700_000_000.0


@pytest.fixture
def kmsg(tmp_path: Path) -> Path:
    path = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "kmsg_raw.txt", path)
    return path


@pytest.fixture
def boot_id(tmp_path: Path) -> Path:
    path = tmp_path / "boot_id"
    path.write_text("9b1d2c3e-0000-4000-8000-000000000001\n")
    return path


def kmsg_collector(kmsg: Path, boot_id: Path, state: Path) -> KmsgCollector:
    return KmsgCollector("node1", str(kmsg), state_path=str(state), boot_time=BOOT, boot_id_path=str(boot_id))


def test_xids_read_but_never_stored_before_a_crash_are_read_again_after_the_restart(
    kmsg: Path, boot_id: Path, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "kmsg.seq"

    def disk_failing(records: object) -> int:
        raise duckdb.IOException('IO Error: Could not write file "fleet.duckdb.wal": Input/output error')

    monkeypatch.setattr(store, "append", disk_failing)
    collector = kmsg_collector(kmsg, boot_id, state)
    agent = Agent([collector], WriteBuffer(store), MetricsState(), FakeClock(BOOT + 10_000))
    agent.sample_round()
    agent.flush()
    collector.close()  # the process dies here: no shutdown, the buffered events are gone

    restarted = kmsg_collector(kmsg, boot_id, state)
    assert len(restarted.collect(BOOT + 10_060).events) == 8
