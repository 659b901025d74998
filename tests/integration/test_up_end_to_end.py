"""`fleetguard up --simulate`, the embedded default, as `make demo` runs it: sampling, /metrics, live risk."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import duckdb
import pytest

from fleetguard.config import load_config
from tests.integration.daemon import FLEETGUARD, scrape
from tests.integration.inprocess import InProcessUp

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# The loops of `up` that wait on its clock: the agent's, the --duration timer, live scoring, incidents.
CLOCK_LOOPS = 4


@pytest.mark.timeout(600)  # the demo model is trained at start-up: minutes on a loaded 2-core machine
def test_up_on_a_simulated_fleet_serves_metrics_and_live_risk_scores(tmp_path: Path) -> None:
    """In-process on a FakeClock (tests/integration/inprocess.py): the minute until the first complete
    scoring step passes on the clock, not the wall; the demo model is trained at start-up as `make demo`
    does, and /metrics and the dashboard are real servers on loopback."""
    store = tmp_path / "var" / "fleetguard.duckdb"
    config = load_config(
        env={},
        overrides={
            "simulate.fleet": "1x4",
            "store.path": str(store),
            "agent.metrics_port": 0,
            "agent.flush_interval_seconds": 1,
            "runtime.port": 0,
            "dashboard.port": 0,
            "controller.listen": "127.0.0.1:0",  # up's read API: any free port
            "collectors.kmsg_state_path": str(tmp_path / "kmsg.seq"),
        },
    )
    up = InProcessUp(config, duration_seconds=3600)
    up.start()
    risk: dict[str, float] = {}

    def risk_served() -> bool:
        nonlocal risk
        match = re.search(r"http://[^/\s]+:(\d+)/metrics", up.out.getvalue())
        assert match, "fleetguard up printed no metrics address:\n" + up.out.getvalue()
        risk = {
            k: v
            for k, v in scrape(int(match.group(1))).items()
            if k.startswith("fleetguard_gpu_failure_risk")
        }
        return bool(risk)

    try:
        # the demo model is trained at start-up, then scored once its first one-minute step is complete
        served = up.run_until(risk_served, config.agent.sample_interval_seconds, CLOCK_LOOPS, 180)
        assert served and len(risk) == 4 and all(0.0 <= v <= 1.0 for v in risk.values()), risk
    finally:
        up.stop()
    assert up.exit_code == 0, up.out.getvalue()
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(DISTINCT device_id) FROM predictions").fetchone() == (4,)
    assert (con.execute("SELECT count(*) FROM gpu_samples").fetchone() or (0,))[0] >= 4


def test_up_stores_every_round_exactly_once_through_the_controllers_ingest_ledger(tmp_path: Path) -> None:
    """`up --simulate 2x8`: each simulated host's rows go through the in-process ingest as that host's
    batches; every round is stored once, and the ledger accounts for every row stored."""
    store = tmp_path / "fleetguard.duckdb"
    args = ["--simulate", "2x8", "--no-predict", "--no-runtime", "--metrics-port", "0", "--duration", "8"]
    proc = subprocess.run(
        [FLEETGUARD, "up", *args, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=180,
        env={
            **os.environ,
            "FLEETGUARD_AGENT_FLUSH_INTERVAL_SECONDS": "1",
            "FLEETGUARD_DASHBOARD_ENABLED": "false",
            "FLEETGUARD_CONTROLLER_LISTEN": "127.0.0.1:0",  # up's read API: any free port
            "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(tmp_path / "kmsg.seq"),
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads([x for x in proc.stdout.splitlines() if x.startswith("{")][-1])
    rounds = summary["rounds"]
    assert rounds >= 3
    assert summary["extras"]["uncommitted_batches"] == 0 and summary["rejected_rows"] == 0
    con = duckdb.connect(str(store), read_only=True)
    try:
        hosts = [r[0] for r in con.execute("SELECT DISTINCT host FROM gpu_samples ORDER BY 1").fetchall()]
        assert len(hosts) == 2
        for host in hosts:
            n, distinct_ts, keys = con.execute(
                "SELECT count(*), count(DISTINCT ts), count(DISTINCT (gpu_index, ts)) FROM gpu_samples "
                "WHERE host = ?",
                [host],
            ).fetchall()[0]
            assert distinct_ts == rounds and n == keys == 8 * rounds  # every round, once
            stored = sum(
                con.execute(f"SELECT count(*) FROM {t} WHERE host = ?", [host]).fetchall()[0][0]
                for t in ("gpu_samples", "nic_samples", "nic_counters", "events")
            )
            batches, seqs, last, ledger_rows = con.execute(
                "SELECT count(DISTINCT boot_id), sum(seq_hi - seq_lo + 1), max(seq_hi), sum(rows) "
                "FROM ingest_ledger WHERE host = ?",
                [host],
            ).fetchall()[0]
            assert batches == 1 and seqs == last  # one run, batches 1..last each committed once
            assert ledger_rows == stored  # every stored row came through the ledger, once
        assert (
            sum(summary["rows_written"].values())
            == con.execute("SELECT sum(rows) FROM ingest_ledger").fetchall()[0][0]
        )
    finally:
        con.close()
