"""A group's columns in their own types: times become TIMESTAMP microseconds exactly as DuckDB's own
conversion made them, and NULL stays NULL."""

from __future__ import annotations

import duckdb

from fleetguard.controller.columns import as_array
from fleetguard.store.schema import TABLES

TS = next(c for c in TABLES["gpu_samples"].columns if c.name == "slow_read_ts")


def test_times_are_the_microseconds_duckdb_rounds_them_to_and_null_stays_null() -> None:
    seconds = [1_795_000_000.0, 1_795_000_000.0000005, 1_795_000_000.1234565, 946_684_800.25, None]
    with duckdb.connect() as con:
        con.register("v", {"ts": as_array(TS, seconds)})
        got = [r[0] for r in con.execute("SELECT epoch_us(ts) FROM v").fetchall()]
        expected = [
            r[0]
            for r in con.execute(
                "SELECT epoch_us(make_timestamp(CAST(round(s * 1000000) AS BIGINT))) "
                "FROM unnest(?::DOUBLE[]) AS t(s)",
                [seconds],
            ).fetchall()
        ]
    assert got == expected and got[-1] is None
