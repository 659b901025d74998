"""One GPU's reads for its page (dashboard/queries/gpus.py, predictions.py), on a real DuckDB store: sought
among its host's rows (BENCHMARKS.md "First render, session 8"), they read exactly what picking its UUID out
of every GPU's rows reads, and a host that is wrong or unknown only costs a wider read."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboard.queries.base import BUCKET, TS, Cursor
from dashboard.queries.gpus import bucket_seconds, gpu_now, gpu_series
from dashboard.queries.predictions import risk_history
from dashboard.snapshot import build_fleet_model
from fleetguard.controller.rollups import Rollups
from fleetguard.store import Store
from tests.dashboard.fleet_store import BuiltFleet


@pytest.fixture
def cur(fleet: BuiltFleet) -> Iterator[Cursor]:
    with Store.open(fleet.path, read_only=True) as store:
        cursor = store.cursor()
        yield cursor
        cursor.close()


def test_the_fleet_model_knows_each_gpus_host(cur: Cursor, fleet: BuiltFleet) -> None:
    model = build_fleet_model(cur, fleet.end_ts, 0.5)
    assert model.gpu_hosts[fleet.failed_gpu_uuid] == fleet.hosts[1]
    assert len(model.gpu_hosts) == len(model.gpus)


def test_a_gpu_sought_on_its_host_is_the_gpu_found_by_its_uuid(cur: Cursor, fleet: BuiltFleet) -> None:
    since, until = fleet.end_ts - 3600, fleet.end_ts
    plain = gpu_now(cur, fleet.failed_gpu_uuid, since, until)
    assert plain is not None and plain.state is not None
    assert plain.identity.host == fleet.hosts[1] and plain.identity.gpu_index == 2
    assert gpu_now(cur, fleet.failed_gpu_uuid, since, until, fleet.hosts[1]) == plain


def test_a_wrong_host_only_widens_the_read(cur: Cursor, fleet: BuiltFleet) -> None:
    since, until = fleet.end_ts - 3600, fleet.end_ts
    wrong = gpu_now(cur, fleet.failed_gpu_uuid, since, until, fleet.hosts[0])
    assert wrong == gpu_now(cur, fleet.failed_gpu_uuid, since, until)


def test_a_gpu_silent_for_the_live_window_has_who_it_was_and_no_state(cur: Cursor, fleet: BuiltFleet) -> None:
    later = fleet.end_ts + 1800  # every GPU silent for half an hour
    found = gpu_now(cur, fleet.failed_gpu_uuid, later - 3600, later, fleet.hosts[1])
    assert found is not None and found.state is None
    assert found.identity.uuid == fleet.failed_gpu_uuid and found.identity.last_ts <= fleet.end_ts
    assert gpu_now(cur, "GPU-no-such-gpu", later - 3600, later) is None


def test_the_series_read_on_the_host_is_the_gpus_own(cur: Cursor, fleet: BuiltFleet) -> None:
    since, until = fleet.end_ts - 3600, fleet.end_ts
    series = gpu_series(cur, fleet.failed_gpu_uuid, fleet.hosts[1], since, until)
    by_uuid = cur.execute(  # the GPU's rows picked out of every GPU's by its UUID, in the same buckets
        f"SELECT {BUCKET} AS b, avg(temperature_celsius), max(ecc_uncorrected_aggregate) FROM gpu_samples "
        f"WHERE ts >= {TS} AND ts <= {TS} AND uuid = ? GROUP BY b ORDER BY b",
        [bucket_seconds(until - since), since, until, fleet.failed_gpu_uuid],
    ).fetchall()
    assert len(by_uuid) > 10
    assert series.ts == [r[0] for r in by_uuid]
    assert series.temperature_celsius == pytest.approx([r[1] for r in by_uuid])
    assert series.ecc_uncorrected_aggregate == [r[2] for r in by_uuid]


def test_the_risk_history_read_on_the_host_is_the_gpus_own(cur: Cursor, fleet: BuiltFleet) -> None:
    since, until = fleet.end_ts - 86400, fleet.end_ts
    at_risk_host = cur.execute(
        "SELECT host FROM predictions WHERE device_id = ? LIMIT 1", [fleet.at_risk_uuid]
    ).fetchone()
    assert at_risk_host is not None
    history = risk_history(cur, fleet.at_risk_uuid, str(at_risk_host[0]), since, until)
    assert [risk for _, risk in history] == [fleet.at_risk_score]


def test_the_hourly_series_read_on_the_host_is_the_gpus_own(fleet: BuiltFleet, tmp_path: Path) -> None:
    copy = tmp_path / "rolled.duckdb"
    shutil.copyfile(fleet.path, copy)
    with Store.open(copy) as store:
        minutes = range(int(fleet.end_ts - 600) // 60, int(fleet.end_ts) // 60 + 1)
        Rollups.recompute(store.connection, set(minutes))  # the controller's rollups over the samples
        cur = store.cursor()
        since, until = fleet.end_ts - 86400, fleet.end_ts
        series = gpu_series(cur, fleet.failed_gpu_uuid, fleet.hosts[1], since, until, "gpu_rollup_1h")
        by_uuid = cur.execute(
            "SELECT max(ecc_uncorrected_volatile_max) FROM gpu_rollup_1h WHERE uuid = ?",
            [fleet.failed_gpu_uuid],
        ).fetchone()
        cur.close()
    assert series.source == "gpu_rollup_1h" and by_uuid is not None and by_uuid[0] >= 1
    assert max(v for v in series.ecc_uncorrected_aggregate if v is not None) == by_uuid[0]
