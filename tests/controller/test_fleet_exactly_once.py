"""A controller and three agents as real processes: kills of either side lose and duplicate nothing."""

from __future__ import annotations

import signal
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest

from tests.controller.fleet_processes import Fleet, kill, stop, summary
from tests.controller.helpers import metric_value

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = ("gpu_samples", "nic_samples", "nic_counters", "events")


def _scalar(con: duckdb.DuckDBPyConnection, sql: str, *params: object) -> int:
    row = con.execute(sql, list(params)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def test_controller_and_agent_kills_store_every_batch_exactly_once(tmp_path: Path, fleet: Fleet) -> None:
    controller = fleet.start_controller()
    # a1 and a2 run until the test stops them (SIGTERM), after a3's second life: no duration to guess that
    # outlasts the kills and restarts on a loaded machine, and no waiting it out on a quiet one.
    agents = {h: fleet.start_agent(h, seed, duration=300) for h, seed in (("a1", 1), ("a2", 2), ("a3", 3))}
    fleet.wait_for_hosts({"a1", "a2", "a3"})

    kill(controller)  # mid-run: agents keep sampling into their spools (a batch a second)
    time.sleep(2)
    controller = fleet.start_controller()

    kill(agents["a3"])  # its spool holds batches the controller may or may not have committed
    time.sleep(1)
    a3_again = fleet.start_agent("a3", 3, duration=2)

    done = {"a3": summary(a3_again)}
    for host in ("a1", "a2"):
        agents[host].send_signal(signal.SIGTERM)
        done[host] = summary(agents[host])
    with urllib.request.urlopen(fleet.url + "/metrics", timeout=30) as response:
        metrics = response.read().decode()
    stop(controller)
    # The restarted a3 sent its spool again (acks are not persisted): the ledger answered "duplicate".
    assert metric_value(metrics, "fleetguard_controller_batches_duplicate_total") > 0

    con = duckdb.connect(str(fleet.store), read_only=True)
    try:
        for host, result in done.items():
            assert result["extras"]["unsent_batches"] == 0, host
            assert result["extras"]["dropped_batches"] == 0, host
        # Exactly once: no row twice (each round's readings have a unique key) ...
        assert _scalar(con, "SELECT count(*) FROM gpu_samples") == _scalar(
            con, "SELECT count(DISTINCT (host, gpu_index, ts)) FROM gpu_samples"
        )
        assert _scalar(con, "SELECT count(*) FROM nic_counters") == _scalar(
            con, 'SELECT count(DISTINCT (host, device, port, "group", counter, ts)) FROM nic_counters'
        )
        for host in ("a1", "a2", "a3"):
            stored = sum(_scalar(con, f"SELECT count(*) FROM {t} WHERE host = ?", host) for t in TABLES)
            # ... every committed batch's rows, and nothing else ...
            assert stored == _scalar(con, 'SELECT sum("rows") FROM ingest_ledger WHERE host = ?', host)
            # ... and no batch missing: each agent incarnation's batches 1..N are all in the ledger.
            for boot_id, seq_lo, seq_hi, ranges in con.execute(
                "SELECT boot_id, min(seq_lo), max(seq_hi), count(*) FROM "
                "(SELECT * FROM ingest_ledger WHERE host = ?) GROUP BY boot_id",
                [host],
            ).fetchall():
                assert seq_lo == 1, (host, boot_id)
                n = _scalar(
                    con,
                    "SELECT sum(seq_hi - seq_lo + 1) FROM ingest_ledger WHERE host = ? AND boot_id = ?",
                    host,
                    boot_id,
                )
                assert n == seq_hi, (host, boot_id, ranges)
        # Agents that stopped normally: everything they spooled is stored.
        for host in ("a1", "a2"):
            written = sum(done[host]["rows_written"].values())
            assert written == sum(
                _scalar(con, f"SELECT count(*) FROM {t} WHERE host = ?", host) for t in TABLES
            )
        boots = _scalar(con, "SELECT count(DISTINCT boot_id) FROM ingest_ledger WHERE host = 'a3'")
        assert boots == 2  # the killed incarnation's spooled batches arrived after its restart
    finally:
        con.close()
