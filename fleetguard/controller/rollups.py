"""1-minute and 1-hour rollups of GPU samples and NIC counters, for long retention and the dashboard.

The writer marks the minutes each committed batch touched; every ROLLUP_SECONDS this task recomputes those
minutes (DELETE + INSERT of the buckets, so late data from an agent catching up is folded in) and the hours
they fall in (from the minute rows, weighted by samples). A compacted counter that did not move has no row in
a minute: no row means no change.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import duckdb
import numpy as np

from fleetguard.shipping.wire import Columns

ROLLUP_SECONDS = 60.0
MINUTE_RETENTION_DAYS = 90.0
HOUR_RETENTION_DAYS = 730.0


def _bucket_sql(epoch_minutes: str) -> str:
    return f"make_timestamp(CAST({epoch_minutes} AS BIGINT) * 60000000)"


_GPU_1M = """
INSERT INTO gpu_rollup_1m
SELECT time_bucket(INTERVAL 1 minute, ts) AS bucket, host, gpu_index, uuid, count(*),
       avg(utilization_gpu_percent), max(utilization_gpu_percent), max(memory_used_bytes),
       avg(temperature_celsius), max(temperature_celsius), avg(power_watts), max(power_watts),
       avg(sm_clock_mhz), bit_or(clocks_event_reasons), max(ecc_corrected_volatile),
       max(ecc_uncorrected_volatile), bool_or(remapped_rows_pending), max(pcie_replay_errors),
       max(coalesce(nvlink_crc_flit_errors, 0) + coalesce(nvlink_crc_data_errors, 0))
FROM gpu_samples WHERE ts >= {lo} AND ts < {hi}
GROUP BY ALL
"""

_NIC_1M = """
INSERT INTO nic_rollup_1m
SELECT time_bucket(INTERVAL 1 minute, ts) AS bucket, host, device, port, counter, "group", count(*),
       arg_max(value, ts), CAST(sum(greatest(delta, 0)) AS UBIGINT), avg(rate_per_second),
       max(rate_per_second), count(*) FILTER (WHERE reset)
FROM nic_counters WHERE ts >= {lo} AND ts < {hi}
GROUP BY ALL
"""

_GPU_1H = """
INSERT INTO gpu_rollup_1h
SELECT time_bucket(INTERVAL 1 hour, bucket) AS hour, host, gpu_index, uuid, sum(samples),
       sum(utilization_gpu_avg * samples) / sum(samples), max(utilization_gpu_max),
       max(memory_used_bytes_max),
       sum(temperature_celsius_avg * samples) / sum(samples), max(temperature_celsius_max),
       sum(power_watts_avg * samples) / sum(samples), max(power_watts_max),
       sum(sm_clock_mhz_avg * samples) / sum(samples), bit_or(clocks_event_reasons_any),
       max(ecc_corrected_volatile_max), max(ecc_uncorrected_volatile_max), bool_or(remapped_rows_pending_any),
       max(pcie_replay_errors_max), max(nvlink_crc_errors_max)
FROM gpu_rollup_1m WHERE bucket >= {lo} AND bucket < {hi}
GROUP BY ALL
"""

_NIC_1H = """
INSERT INTO nic_rollup_1h
SELECT time_bucket(INTERVAL 1 hour, bucket) AS hour, host, device, port, counter, "group", sum(samples),
       arg_max(value_last, bucket), CAST(sum(delta_sum) AS UBIGINT),
       sum(rate_per_second_avg * samples) / sum(samples), max(rate_per_second_max), sum(resets)
FROM nic_rollup_1m WHERE bucket >= {lo} AND bucket < {hi}
GROUP BY ALL
"""


def _ranges(units: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted integers as [lo, hi) runs."""
    out: list[tuple[int, int]] = []
    for u in sorted(set(units)):
        if out and out[-1][1] == u:
            out[-1] = (out[-1][0], u + 1)
        else:
            out.append((u, u + 1))
    return out


class Rollups:
    """The writer calls `touched` for each committed batch; `__call__` is the periodic task."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._minutes: set[int] = set()

    def touched(self, tables: dict[str, Columns]) -> None:
        minutes: set[int] = set()
        for name in ("gpu_samples", "nic_counters"):
            ts = (tables.get(name) or {}).get("ts")
            if ts is not None and len(ts):  # a list, or an array (wire version 2, the edge processes)
                lo, hi = (min(ts), max(ts)) if isinstance(ts, list) else (np.min(ts), np.max(ts))
                lo, hi = int(lo // 60), int(hi // 60)
                minutes.update(range(lo, min(hi, lo + 1440) + 1))  # at most a day per batch
        if minutes:
            with self._lock:
                self._minutes |= minutes

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        with self._lock:
            minutes, self._minutes = self._minutes, set()
        try:
            self.recompute(con, minutes)
        except BaseException:
            with self._lock:  # the transaction rolls back: do them next time
                self._minutes |= minutes
            raise
        self._retain(con, now)

    @staticmethod
    def recompute(con: duckdb.DuckDBPyConnection, minutes: set[int]) -> None:
        for lo, hi in _ranges(minutes):
            bounds = {"lo": _bucket_sql(str(lo)), "hi": _bucket_sql(str(hi))}
            for table, insert in (("gpu_rollup_1m", _GPU_1M), ("nic_rollup_1m", _NIC_1M)):
                con.execute(f"DELETE FROM {table} WHERE bucket >= {bounds['lo']} AND bucket < {bounds['hi']}")
                con.execute(insert.format(**bounds))
        for lo, hi in _ranges(m // 60 for m in minutes):
            bounds = {"lo": _bucket_sql(str(lo * 60)), "hi": _bucket_sql(str(hi * 60))}
            for table, insert in (("gpu_rollup_1h", _GPU_1H), ("nic_rollup_1h", _NIC_1H)):
                con.execute(f"DELETE FROM {table} WHERE bucket >= {bounds['lo']} AND bucket < {bounds['hi']}")
                con.execute(insert.format(**bounds))

    @staticmethod
    def _retain(con: duckdb.DuckDBPyConnection, now: float) -> None:
        for table, days in (
            ("gpu_rollup_1m", MINUTE_RETENTION_DAYS),
            ("nic_rollup_1m", MINUTE_RETENTION_DAYS),
            ("gpu_rollup_1h", HOUR_RETENTION_DAYS),
            ("nic_rollup_1h", HOUR_RETENTION_DAYS),
        ):
            cutoff = int((now - days * 86400) // 60)
            con.execute(f"DELETE FROM {table} WHERE bucket < {_bucket_sql(str(cutoff))}")
