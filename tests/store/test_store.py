"""The DuckDB store: records round-trip, schema versions, batched writes, retention and Parquet export."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from fleetguard.records.action_requests import ActionKind
from fleetguard.records.findings import ActionOutcome, ActionRecord, Finding, FindingKind, Severity
from fleetguard.records.prediction import Prediction
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample, NicSample
from fleetguard.store import Store, StoreError, StoreLocked, UnstorableRows
from fleetguard.store.ingest_order import ORDERED_TABLES, SEQ_COLUMN
from fleetguard.store.migrations import CURRENT_VERSION, MIGRATIONS
from fleetguard.store.schema import TABLE_BY_RECORD, TABLES

NOW = 1_763_800_000.25
SCHEMA_V1 = Path(__file__).parent / "fixtures" / "schema_v1.sql"


def full_gpu_sample(**changes: object) -> GpuSample:
    values: dict[str, object] = {}
    for f in dataclasses.fields(GpuSample):
        if f.name == "ts":
            values[f.name] = NOW
        elif f.name == "host":
            values[f.name] = "host-a"
        elif "bool" in str(f.type):
            values[f.name] = True
        elif "int" in str(f.type):
            values[f.name] = 7
        elif "float" in str(f.type):
            values[f.name] = 1.5
        else:
            values[f.name] = f"{f.name}-text"
    values.update(changes)
    return GpuSample(**values)  # type: ignore[arg-type]


ONE_OF_EACH: list[object] = [
    full_gpu_sample(),
    NicSample(NOW, "host-a", "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand"),
    NicCounterSample(NOW, "host-a", "mlx5_0", 1, "symbol_error", "counters", 12, 2, 0.5, False),
    Event(
        NOW,
        "host-a",
        EventKind.XID,
        "kmsg",
        "NVRM: Xid (PCI:0000:9b:00): 79",
        79,
        "0000:9b:00.0",
        3,
        None,
        42,
        "python",
        1001,
        5,
        NOW + 30.0,
    ),
    Heartbeat(NOW, "host-a", "job-1", 3, 3, 8, 4242, 100, "step", "running"),
    StepTiming(NOW, "host-a", "job-1", 3, 100, "compute", 0.125),
    CollectiveProgress(NOW, "host-a", "job-1", 3, "0", 10, 9, 8, "nccl:all_reduce", 1024, "client"),
    Finding(
        NOW,
        "f-1",
        FindingKind.DEAD_RANK,
        Severity.CRITICAL,
        "job-1/rank 3",
        "rank 3 died",
        "host-a",
        "job-1",
        3,
        None,
        '{"pid": 4242}',
    ),
    ActionRecord(
        NOW, "a-1", ActionKind.RESTART, "job-1", "f-1", ActionOutcome.SUCCEEDED, "SIGTERM to worker group"
    ),
    Prediction(NOW, "host-a", "GPU-1", 0.83, 1, "model-1", 168.0),
]


@pytest.fixture
def store_v1(tmp_path: Path) -> Path:
    """A store file exactly as schema version 1 made it (frozen DDL, not today's table definitions)."""
    path = tmp_path / "v1.duckdb"
    con = duckdb.connect(str(path))
    con.execute(SCHEMA_V1.read_text())
    con.close()
    return path


def read_back(store: Store, record: object) -> object:
    table = TABLE_BY_RECORD[type(record)]
    cols = ", ".join(f"epoch_us({c.name}) / 1e6" if c.is_timestamp else f'"{c.name}"' for c in table.columns)
    row = store.connection.execute(f"SELECT {cols} FROM {table.name}").fetchall()
    assert len(row) == 1
    return type(record)(*row[0])


def test_every_record_type_round_trips_through_its_table(store: Store) -> None:
    assert store.append(ONE_OF_EACH) == len(ONE_OF_EACH)
    for record in ONE_OF_EACH:
        assert read_back(store, record) == record


def test_a_field_the_gpu_does_not_support_is_stored_as_null_not_zero(store: Store) -> None:
    store.append([full_gpu_sample(power_watts=None, remapped_rows_pending=None)])
    row = store.connection.execute(
        "SELECT power_watts, remapped_rows_pending, temperature_celsius FROM gpu_samples"
    ).fetchall()
    assert row == [(None, None, 1.5)]


def test_timestamps_are_stored_as_utc_timestamps_to_the_microsecond(store: Store) -> None:
    store.append([full_gpu_sample(ts=1_700_000_000.123456)])
    row = store.connection.execute("SELECT CAST(ts AS VARCHAR) FROM gpu_samples").fetchall()
    assert row == [("2023-11-14 22:13:20.123456",)]


def test_unsigned_64_bit_counter_values_fit(store: Store) -> None:
    store.append([NicCounterSample(NOW, "h", "mlx5_0", 1, "port_xmit_data", "counters", 2**64 - 1)])
    assert store.connection.execute("SELECT value FROM nic_counters").fetchall() == [(2**64 - 1,)]


def test_counters_past_2_to_the_63_keep_every_digit_in_a_batch_with_small_ones(store: Store) -> None:
    values = [5, 2**63 + 1, 2**64 - 1]
    store.append([NicCounterSample(NOW, "h", "mlx5_0", 1, "port_xmit_data", "counters", v) for v in values])
    rows = store.connection.execute("SELECT value FROM nic_counters ORDER BY value").fetchall()
    assert [r[0] for r in rows] == values


def test_a_bad_record_fails_with_its_own_error_not_the_aborted_transaction_it_leaves(store: Store) -> None:
    with pytest.raises(duckdb.ConversionException, match="not a number"):
        store.append([full_gpu_sample(gpu_index="not a number")])


def test_an_integer_too_large_for_its_column_is_named_with_its_record_and_nothing_is_written(
    store: Store,
) -> None:
    poison = full_gpu_sample(gpu_index=2**63)
    with pytest.raises(UnstorableRows) as caught:
        store.append([full_gpu_sample(), poison, *ONE_OF_EACH[1:]])
    assert caught.value.table == "gpu_samples"
    assert [(row is poison, reason) for row, reason in caught.value.rows] == [
        (True, "gpu_index=9223372036854775808 is outside BIGINT")
    ]
    assert sum(store.counts().values()) == 0


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (
            NicCounterSample(NOW, "h", "mlx5_0", 1, "port_xmit_data", "counters", 2**64),
            "value=18446744073709551616 is outside UBIGINT",
        ),
        (
            NicCounterSample(NOW, "h", "mlx5_0", 1, "port_xmit_data", "counters", 2**64 - 1, 2**64 - 1),
            "delta=18446744073709551615 is outside BIGINT",
        ),
        (
            Event(NOW, "h", EventKind.XID, "kmsg", "m", seq=10**20),
            "seq=100000000000000000000 is outside BIGINT",
        ),
        (
            CollectiveProgress(NOW, "h", "j", 0, "pg", 10**30, 0, 0),
            "last_enqueued=1000000000000000000000000000000 is outside BIGINT",
        ),
        (full_gpu_sample(ts=float("inf")), "ts=inf is not a time a TIMESTAMP holds"),
        (
            Event(NOW, "h", EventKind.XID, "kmsg", "m", last_ts=1e300),
            "last_ts=1e+300 is not a time a TIMESTAMP holds",
        ),
    ],
    ids=[
        "ubigint-past-2**64",
        "delta-past-2**63",
        "nullable-seq",
        "collective-seq-1e30",
        "ts-inf",
        "ts-1e300",
    ],
)
def test_every_value_a_column_cannot_hold_is_named_before_any_sql(
    store: Store, record: object, reason: str
) -> None:
    neighbours = [
        Event(NOW, "h", EventKind.XID, "kmsg", "m", seq=None),
        Event(NOW, "h", EventKind.XID, "kmsg", "m", seq=3),
    ]
    with pytest.raises(UnstorableRows) as caught:
        store.append([*neighbours, record])
    assert [(row is record, why) for row, why in caught.value.rows] == [(True, reason)]
    store.append(neighbours)  # the connection is usable and the rest is storable
    assert store.counts()["events"] == 2


def test_a_transaction_left_aborted_on_the_connection_does_not_block_later_writes(store: Store) -> None:
    store.connection.execute("BEGIN TRANSACTION")
    with pytest.raises(duckdb.ConstraintException):
        store.connection.execute("INSERT INTO gpu_samples (ts) VALUES (NULL)")
    assert store.append([full_gpu_sample()]) == 1
    assert store.counts()["gpu_samples"] == 1


def test_two_threads_appending_at_once_store_every_row(store: Store) -> None:
    rounds, gpus = 100, 8
    errors: list[BaseException] = []

    def write(host: str) -> None:
        for i in range(rounds):
            try:
                store.append([full_gpu_sample(host=host, ts=NOW + i, gpu_index=g) for g in range(gpus)])
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(host,)) for host in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.counts()["gpu_samples"] == 2 * rounds * gpus


def test_a_batch_with_a_bad_record_writes_nothing(store: Store) -> None:
    bad = full_gpu_sample(gpu_index="not a number")
    with pytest.raises(duckdb.Error):
        store.append([full_gpu_sample(), bad])
    assert store.counts()["gpu_samples"] == 0


def test_unknown_record_types_are_refused_by_name(store: Store) -> None:
    with pytest.raises(StoreError, match="str"):
        store.append(["not a record"])


def assert_every_table_matches_its_record(store: Store) -> None:
    for table in TABLES.values():
        rows = store.connection.execute(
            "SELECT column_name, data_type, is_nullable, column_default IS NOT NULL "
            "FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table.name],
        ).fetchall()
        expected = [
            (c.name, c.sql_type, "YES" if c.nullable else "NO", c.default_sql is not None)
            for c in table.columns
        ]
        if table.name in ORDERED_TABLES:  # the store's own bookkeeping, after the record's fields
            expected.append((SEQ_COLUMN, "BIGINT", "YES", True))
        assert rows == expected, table.name


def test_every_table_matches_its_record_after_all_migrations(store: Store) -> None:
    assert_every_table_matches_its_record(store)


def test_a_store_made_by_an_older_version_opens_and_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with Store.open(path, schema_version_target=1) as old:
        assert old.schema_version == 1
        old.append([full_gpu_sample()])
        tables = {r[0] for r in old.connection.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "heartbeats" not in tables
    with Store.open(path) as new:
        assert new.schema_version == CURRENT_VERSION == MIGRATIONS[-1].version
        assert new.counts()["gpu_samples"] == 1
        new.append(ONE_OF_EACH)
        assert new.counts()["heartbeats"] == 1


def test_a_store_made_by_schema_version_1_is_upgraded_to_match_todays_records(store_v1: Path) -> None:
    with Store.open(store_v1) as store:
        assert store.schema_version == CURRENT_VERSION
        assert_every_table_matches_its_record(store)


def test_a_store_made_by_schema_version_1_keeps_its_rows_and_takes_todays_records(store_v1: Path) -> None:
    with Store.open(store_v1) as store:
        store.append(ONE_OF_EACH)
        counts = store.counts()
    assert counts["gpu_samples"] == 2 and counts["events"] == 2
    assert all(counts[t.name] >= 1 for t in TABLES.values())


def test_a_store_made_by_schema_version_1_exports_after_the_upgrade(store_v1: Path, tmp_path: Path) -> None:
    with Store.open(store_v1) as store:
        store.append(ONE_OF_EACH)
        written = store.export_parquet(tmp_path / "parquet")
    assert written == {"gpu_samples": 2, "events": 2} | {
        t.name: 1 for t in TABLES.values() if t.name not in ("gpu_samples", "events")
    }


def test_exporting_an_older_store_opened_read_only_writes_the_tables_it_has_and_says_how_to_upgrade(
    store_v1: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), Store.open(store_v1, read_only=True) as store:
        written = store.export_parquet(tmp_path / "parquet")
    assert written == {"gpu_samples": 1, "events": 1}
    assert "heartbeats" in caplog.text and "open it for writing once" in caplog.text


def test_a_store_from_a_newer_fleetguard_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "future.duckdb"
    Store.open(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE fleetguard_meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(StoreError, match="newer"):
        Store.open(path)


def test_a_second_writer_gets_a_clear_locked_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    Store.open(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, duckdb
            con = duckdb.connect({str(path)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked, match="another process"):
            Store.open(path)
    finally:
        holder.communicate("")


def test_read_only_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "ro.duckdb"
    Store.open(path).close()
    with Store.open(path, read_only=True) as ro, pytest.raises(StoreError, match="read-only"):
        ro.append([full_gpu_sample()])


def test_opening_a_missing_store_read_only_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="fleetguard up"):
        Store.open(tmp_path / "missing.duckdb", read_only=True)


def test_dataframes_append_by_column_name_with_epoch_or_datetime_times(store: Store) -> None:
    epoch = pd.DataFrame({"uuid": ["u0", "u1"], "gpu_index": [0, 1], "host": ["h", "h"], "ts": [NOW, NOW]})
    dated = epoch.assign(ts=pd.to_datetime(epoch["ts"], unit="s"))
    assert store.append_columns("gpu_samples", epoch) == 2
    assert store.append_columns("gpu_samples", dated) == 2
    rows = store.connection.execute("SELECT DISTINCT epoch(ts) FROM gpu_samples").fetchall()
    assert rows == [(NOW,)]


def test_dict_columns_append_like_dataframes(store: Store) -> None:
    assert (
        store.append_columns(
            "events", {"ts": [NOW], "host": ["h"], "kind": ["xid"], "source": ["t"], "message": ["m"]}
        )
        == 1
    )
    assert store.connection.execute("SELECT count, code FROM events").fetchall() == [(1, None)]


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (
            pd.DataFrame({"ts": [NOW], "host": ["h"], "gpu_index": [0], "uuid": ["u"], "bogus": [1]}),
            "unknown columns \\['bogus'\\]",
        ),
        (pd.DataFrame({"ts": [NOW], "host": ["h"]}), "missing required columns \\['gpu_index', 'uuid'\\]"),
    ],
)
def test_columns_that_do_not_fit_the_table_are_named_and_nothing_is_written(
    store: Store, frame: pd.DataFrame, message: str
) -> None:
    with pytest.raises(StoreError, match=message):
        store.append_columns("gpu_samples", frame)
    assert store.counts()["gpu_samples"] == 0


def test_retention_deletes_only_rows_older_than_the_limit(store: Store) -> None:
    day = 86400.0
    store.append(
        [
            full_gpu_sample(ts=NOW - 40 * day),
            full_gpu_sample(ts=NOW - 10 * day),
            Event(NOW - 31 * day, "h", EventKind.XID, "kmsg", "old"),
            Event(NOW, "h", EventKind.XID, "kmsg", "new"),
        ]
    )
    deleted = store.apply_retention(30, now=NOW)
    assert deleted["gpu_samples"] == 1 and deleted["events"] == 1
    assert store.counts()["gpu_samples"] == 1
    assert store.connection.execute("SELECT message FROM events").fetchall() == [("new",)]


def test_retention_refuses_a_non_positive_limit(store: Store) -> None:
    with pytest.raises(StoreError, match="positive"):
        store.apply_retention(0, now=NOW)


def test_export_writes_hive_partitions_by_day_and_host_and_never_duplicates(
    store: Store, tmp_path: Path
) -> None:
    day = 86400.0
    store.append(
        [
            full_gpu_sample(host="a"),
            full_gpu_sample(host="b"),
            full_gpu_sample(host="a", ts=NOW + day),
            ActionRecord(NOW, "a1", ActionKind.RESTART, "job", None, ActionOutcome.SUCCEEDED),
        ]
    )
    out = tmp_path / "parquet"
    for _ in range(2):
        written = store.export_parquet(out)
    assert written == {"gpu_samples": 3, "actions": 1}
    dirs = sorted(str(p.relative_to(out)) for p in out.glob("gpu_samples/dt=*/host=*"))
    assert dirs == [
        "gpu_samples/dt=2025-11-22/host=a",
        "gpu_samples/dt=2025-11-22/host=b",
        "gpu_samples/dt=2025-11-23/host=a",
    ]
    assert list(out.glob("actions/dt=*/host=*/*.parquet"))  # actions carry a host since schema v12
    relation = duckdb.sql(
        f"SELECT host, count(*) FROM read_parquet('{out}/gpu_samples/**/*.parquet', hive_partitioning=true) "
        "GROUP BY host ORDER BY host"
    )
    assert relation is not None
    rows = relation.fetchall()
    assert rows == [("a", 2), ("b", 1)]


def test_migration_versions_only_increase() -> None:
    # `migrate` applies the steps above a store's version in tuple order: a step listed out of order, or a
    # version reused, would be skipped for every store already past it.
    versions = [m.version for m in MIGRATIONS]
    assert versions == sorted(set(versions))


def test_on_connect_runs_once_per_open_and_a_failing_one_releases_the_store(tmp_path: Path) -> None:
    path = tmp_path / "hooked.duckdb"
    calls: list[str] = []
    with Store.open(path, on_connect=lambda: calls.append("write")) as store:
        assert store.schema_version == CURRENT_VERSION  # migrations ran after it
    with Store.open(path, read_only=True, on_connect=lambda: calls.append("read")):
        pass
    assert calls == ["write", "read"]

    def fail() -> None:
        raise OSError("hook failed")

    with pytest.raises(OSError, match="hook failed"):
        Store.open(path, on_connect=fail)
    with Store.open(path) as again:  # the failed open left the store usable
        assert again.schema_version == CURRENT_VERSION
