"""Input contract: the readers accept Parquet/CSV files or directories and reject bad input clearly."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from fleetguard.predict.contract import InputError, register_failures, register_samples

Writer = Callable[[Path, dict[str, list[object]]], Path]


def test_missing_column_names_the_file_and_the_column(tmp_path: Path, table_writer: Writer) -> None:
    path = table_writer(tmp_path / "s.parquet", {"device_id": ["a"], "temp": [1.0]})
    with pytest.raises(InputError, match=r"s\.parquet: missing column 'ts'"):
        register_samples(duckdb.connect(), path)


def test_unparseable_time_names_the_file_the_column_and_a_value(tmp_path: Path, table_writer: Writer) -> None:
    path = table_writer(
        tmp_path / "s.csv", {"device_id": ["a", "b"], "ts": ["2024-01-01", "yesterday"], "t": [1, 2]}
    )
    with pytest.raises(InputError, match=r"s\.csv: column ts: 1 value\(s\) are not a time.*yesterday"):
        register_samples(duckdb.connect(), path)


def test_empty_file_is_rejected_with_its_name(tmp_path: Path, table_writer: Writer) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(InputError, match=r"empty\.csv: empty file"):
        register_samples(duckdb.connect(), path)


def test_header_only_file_is_rejected_as_having_no_rows(tmp_path: Path, table_writer: Writer) -> None:
    path = tmp_path / "s.csv"
    path.write_text("device_id,ts,temp\n")
    with pytest.raises(InputError, match="no rows"):
        register_samples(duckdb.connect(), path)


def test_iso_text_and_epoch_seconds_give_the_same_times(tmp_path: Path, table_writer: Writer) -> None:
    iso = table_writer(tmp_path / "iso.csv", {"device_id": ["a"], "ts": ["2024-01-01T01:00:00Z"], "t": [1.0]})
    epoch = table_writer(tmp_path / "epoch.parquet", {"device_id": ["a"], "ts": [1704070800], "t": [1.0]})
    times = []
    for path in (iso, epoch):
        con = duckdb.connect()
        register_samples(con, path)
        times.append(con.execute("SELECT ts FROM fg_samples").fetchone())
    assert times[0] == times[1] == (1704070800.0,)


def test_text_columns_are_categorical_and_identifier_like_ones_ignored_with_one_warning(
    tmp_path: Path, table_writer: Writer
) -> None:
    n = 300
    path = table_writer(
        tmp_path / "s.parquet",
        {
            "device_id": [f"d{i}" for i in range(n)],
            "ts": [float(i) for i in range(n)],
            "model": ["x" if i % 2 else "y" for i in range(n)],
            "serial": [f"S{i}" for i in range(n)],  # one value per row: an identifier, not a category
            "temp": [3.0] * n,
        },
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inputs = register_samples(duckdb.connect(), path)
    assert inputs.feature_columns == ("temp",)
    assert inputs.categorical_columns == ("model",)
    assert inputs.ignored_columns == ("serial",)
    assert len(caught) == 1 and "serial" in str(caught[0].message)


def test_a_directory_of_files_reads_as_one_input(tmp_path: Path, table_writer: Writer) -> None:
    (tmp_path / "d").mkdir()
    table_writer(tmp_path / "d" / "a.parquet", {"device_id": ["a"], "ts": [1.0], "t": [1.0]})
    table_writer(tmp_path / "d" / "b.parquet", {"device_id": ["b"], "ts": [2.0], "t": [2.0]})
    con = duckdb.connect()
    register_samples(con, tmp_path / "d")
    assert con.execute("SELECT count(*) FROM fg_samples").fetchone() == (2,)


def test_failures_without_kind_default_to_failure(tmp_path: Path, table_writer: Writer) -> None:
    path = table_writer(tmp_path / "f.csv", {"device_id": ["a"], "ts": [5.0]})
    con = duckdb.connect()
    register_failures(con, path)
    assert con.execute("SELECT device_id, ts, kind FROM fg_failures").fetchall() == [("a", 5.0, "failure")]
