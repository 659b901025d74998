"""The agent as operators run it: a real process on the simulated fleet, stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import duckdb
import pytest

from fleetguard import client as fg
from tests.controller.fleet_processes import Fleet, free_port, stop, summary
from tests.integration.daemon import Daemon, scrape

pytestmark = pytest.mark.integration


def test_every_sample_produced_before_sigterm_is_in_duckdb(tmp_path: Path) -> None:
    daemon = Daemon(
        ["agent", "--simulate", "2x4", "--no-faults"],
        tmp_path,
        env={"FLEETGUARD_AGENT_FLUSH_INTERVAL_SECONDS": "30"},
    )  # the last rows exist only in memory
    daemon.wait_for_rounds(3)
    summary = json.loads(daemon.stop().strip().splitlines()[-1])
    con = duckdb.connect(str(tmp_path / "fleet.duckdb"), read_only=True)
    gpu_rows, distinct_ts = con.execute("SELECT count(*), count(DISTINCT ts) FROM gpu_samples").fetchall()[0]
    assert summary["rounds"] >= 3
    assert distinct_ts == summary["rounds"]  # every round, including the one just before SIGTERM
    assert gpu_rows == 8 * summary["rounds"]  # 2 hosts x 4 GPUs each round
    assert con.execute("SELECT count(*) FROM nic_samples").fetchall()[0][0] == 16 * summary["rounds"]
    for table, rows in summary["rows_written"].items():
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == rows
    assert summary["write_errors"] == 0 and summary["rejected_rows"] == 0


def test_metrics_are_served_while_sampling(tmp_path: Path) -> None:
    daemon = Daemon(["agent", "--simulate", "1x2"], tmp_path)
    try:
        daemon.wait_for_rounds(2)
        metrics = daemon.metrics()
        assert metrics["fleetguard_agent_rounds_total"] >= 2
    finally:
        daemon.stop()


def test_the_agent_process_loads_none_of_the_heavy_libraries(tmp_path: Path) -> None:
    """The host daemon stays light: no numpy, pandas, pyarrow, scikit-learn, xgboost or dash in its address
    space, once it has stored rows (the store's write path is where numpy used to come in)."""
    daemon = Daemon(["agent", "--simulate", "1x8"], tmp_path, env={"FLEETGUARD_RUNTIME_ENABLED": "true"})
    try:
        daemon.wait_for_rounds(2)
        deadline = time.monotonic() + 60
        while not scrape(daemon.port).get("fleetguard_store_rows_written_total{table=gpu_samples}"):
            assert time.monotonic() < deadline, "no rows stored within 60 s"
            time.sleep(0.2)  # polling a real process until its first flush, bounded by the deadline
        maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
    finally:
        daemon.stop()
    assert "/_duckdb." in maps  # the check does see the extension modules the agent loads
    for heavy in ("/numpy/", "/pandas/", "/pyarrow/", "/sklearn/", "/xgboost/", "/dash/", "/torch/"):
        assert heavy not in maps, f"the agent loaded {heavy.strip('/')}"


def test_the_agent_takes_heartbeats_from_training_ranks_and_stores_them(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = Daemon(
        ["agent", "--simulate", "1x2", "--no-faults"],
        tmp_path,
        env={"FLEETGUARD_RUNTIME_ENABLED": "true", "FLEETGUARD_RUNTIME_PORT": str(port)},
    )
    try:
        daemon.wait_for_rounds(1)
        # a rank whose pid is this test process: alive for as long as the agent watches it
        identity = fg.Identity("job-e2e", rank=3, local_rank=3, world_size=4, host="h", pid=os.getpid())
        client = fg.Client(identity, endpoint=f"127.0.0.1:{port}", heartbeat_interval_seconds=60.0)
        client.step(7)
        assert client.report_once()
        client.close()
    finally:
        daemon.stop()
    con = duckdb.connect(str(tmp_path / "fleet.duckdb"), read_only=True)
    rows = con.execute("SELECT job_id, rank, step FROM heartbeats ORDER BY ts").fetchall()
    assert (f"job-e2e@uid{os.getuid()}", 3, 7) in rows  # jobs are keyed by owner


def test_an_agent_that_ships_to_a_controller_keeps_no_duckdb(tmp_path: Path) -> None:
    """`fleetguard agent --simulate 1x8` shipping to a real controller on loopback: its rows arrive, and
    the agent's address space holds no DuckDB (nor numpy, pandas or pyarrow): its sink is the spool."""
    fleet = Fleet(tmp_path, free_port())
    try:
        controller = fleet.start_controller()
        agent = fleet.start_agent(
            "gpu-a", seed=1, duration=120, runtime="enabled = true\nport = 0\n", simulate="1x8"
        )
        fleet.wait_for_hosts({"gpu-a"})
        deadline = time.monotonic() + 60
        while fleet.hosts()["gpu-a"]["batches"] < 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # polling real processes, bounded by the deadline
        maps = Path(f"/proc/{agent.pid}/maps").read_text()
        stop(agent)
        done = summary(agent)
        stop(controller)
    finally:
        fleet.cleanup()
    assert "/_json." in maps or "/_ssl." in maps or "/zlib" in maps  # the check does see extension modules
    for heavy in ("duckdb", "/numpy/", "/pandas/", "/pyarrow/"):
        assert heavy not in maps, f"the shipping agent loaded {heavy.strip('/')}"
    assert not (tmp_path / "gpu-a-unused.duckdb").exists()
    assert done["extras"]["unsent_batches"] == 0 and done["extras"]["committed_batches"] >= 3
    con = duckdb.connect(str(fleet.store), read_only=True)
    try:
        for table, rows in done["rows_written"].items():
            stored = con.execute(f"SELECT count(*) FROM {table} WHERE host = 'gpu-a'").fetchall()[0][0]
            assert stored == rows, table
        rounds = con.execute("SELECT count(DISTINCT ts) FROM gpu_samples WHERE host = 'gpu-a'").fetchall()
        assert rounds[0][0] == done["rounds"]  # every round, the last one before SIGTERM included
    finally:
        con.close()
