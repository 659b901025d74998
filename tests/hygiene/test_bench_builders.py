"""The benchmarks' own builders still run against the schema as it is: a migration that breaks a bench's
inserts (as `breaker_counted` once broke bench/dashboard_store.py unseen) fails here, not in the next
session's measurement. Small fleets, the same code paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[2]


def _bench(args: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_the_dashboard_bench_store_builds_with_every_table_the_pages_read(tmp_path: Path) -> None:
    path = tmp_path / "dbench.duckdb"
    out = json.loads(_bench(["bench/dashboard_store.py", str(path)], {"FLEETGUARD_BENCH_HOSTS": "8"}))
    assert out["incidents"] > 0
    for table in ("gpu_samples", "nic_samples", "nic_counters", "events", "heartbeats", "predictions"):
        assert out["rows"][table] > 0, table
    con = duckdb.connect(str(path), read_only=True)
    try:
        for table in ("incident_actions", "alert_outbox", "alert_deliveries", "incident_evidence"):
            row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert row is not None and row[0] > 0, table
    finally:
        con.close()


def test_the_diagnosis_round_bench_runs_a_round_over_a_real_store(tmp_path: Path) -> None:
    out = _bench(
        ["bench/diagnosis_round.py", "--hosts", "8", "--rounds", "2", "--warmup", "1", "--dir", str(tmp_path)]
    )
    row = [line for line in out.splitlines() if line.startswith("| 8 |")]
    assert row, out
    records = int(row[0].split("|")[2].replace(",", ""))
    assert records >= 8 * 8 * (1 + 1 + 20)  # a second of 8 hosts: per GPU a sample, a port state, 20 counters


def test_the_round_phases_bench_times_the_steps_of_a_round() -> None:
    out = _bench(["bench/diagnosis_round_phases.py", "--hosts", "8", "--rounds", "2", "--warmup", "1"])
    steps = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
    # Every step is still where the bench wraps it: a renamed one would silently drop out of its table.
    wrapped = {"feed.read", "feed._gpu_split", "feed._counters", "feed._rows", "rules.observations"}
    wrapped |= {"rules._take_steady", "rules._keep_steady", "rules._gpu_rows", "rules._port_rows"}
    assert wrapped | {"store.persist"} <= steps, out


def test_the_model_build_bench_times_every_step_of_a_build(tmp_path: Path) -> None:
    path = tmp_path / "dbench.duckdb"
    _bench(["bench/dashboard_store.py", str(path)], {"FLEETGUARD_BENCH_HOSTS": "8"})
    out = _bench(["bench/dashboard_model_build.py", "--store", str(path), "--runs", "2", "--warmup", "1"])
    steps = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
    # Every step is still one the build calls by that name: a renamed one would drop out of the table.
    assert {"the whole build", "latest_gpu_states", "gpu_views", "port_views", "host_views"} <= steps, out
    gpus = int(out.split("| step (", 1)[1].split(" GPUs", 1)[0].replace(",", ""))
    assert gpus > 0, out  # the model was built of the store's live GPUs
