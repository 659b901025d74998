"""GPU queries: the latest state of every GPU, one GPU's time series and its memory-error history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import BUCKET, TS, Cursor, Row, as_float, as_int, fetch, host_rows

# The fleet's live state reads this much of the newest samples; older GPUs count as silent elsewhere.
LIVE_WINDOW_SECONDS: Final = 600.0
MAX_SERIES_POINTS: Final = 360


@dataclass(frozen=True, slots=True)
class GpuState:
    host: str
    gpu_index: int
    uuid: str
    last_ts: float
    name: str | None
    utilization_gpu_percent: float | None
    memory_used_bytes: int
    memory_total_bytes: int
    temperature_celsius: float | None
    power_watts: float | None
    sm_clock_mhz: int
    clocks_event_reasons: int
    ecc_corrected_volatile: int
    ecc_uncorrected_volatile: int
    remapped_rows_pending: bool
    remapped_rows_failure: bool
    pci_bus_id: str | None


# The newest row per GPU by window function: 2.5x faster than one arg_max per column on 16,384 GPUs.
_LATEST_SQL: Final = f"""
SELECT host, gpu_index, uuid, epoch(ts), name, utilization_gpu_percent, coalesce(memory_used_bytes, 0),
       coalesce(memory_total_bytes, 0), temperature_celsius, power_watts, coalesce(sm_clock_mhz, 0),
       coalesce(clocks_event_reasons, 0), coalesce(ecc_corrected_volatile, 0),
       coalesce(ecc_uncorrected_volatile, 0), coalesce(remapped_rows_pending, false),
       coalesce(remapped_rows_failure, false), pci_bus_id
FROM gpu_samples
WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
QUALIFY row_number() OVER (PARTITION BY uuid ORDER BY ts DESC) = 1
ORDER BY host, gpu_index
"""


def latest_gpu_states(cur: Cursor, now: float, host: str | None = None) -> list[GpuState]:
    """Every GPU that sampled within the live window (of one host, or all), with its newest values."""
    rows = fetch(cur, _LATEST_SQL, [now - LIVE_WINDOW_SECONDS, now, host, host])
    # Columns come typed and NULL-free from the SQL (coalesce): 16,384 rows build without per-value checks.
    return [GpuState(*r) for r in rows]


@dataclass(frozen=True, slots=True)
class GpuSeries:
    """Bucketed averages (maxima for counters) of one GPU over a window, oldest first."""

    ts: list[float]
    utilization_gpu_percent: list[float | None]
    memory_used_gib: list[float | None]
    temperature_celsius: list[float | None]
    power_watts: list[float | None]
    sm_clock_mhz: list[float | None]
    throttle_reasons: list[int]  # OR of the clocks-event bits seen in the bucket
    ecc_corrected_aggregate: list[int | None]
    ecc_uncorrected_aggregate: list[int | None]
    remapped_rows_corrected: list[int | None]
    remapped_rows_uncorrected: list[int | None]
    ecc_scope: str = "aggregate"  # which ECC counters: raw samples carry the aggregate ones
    source: str = "gpu_samples"


_SERIES_COLUMNS: Final = """ts, uuid, utilization_gpu_percent, memory_used_bytes, temperature_celsius,
power_watts, sm_clock_mhz, clocks_event_reasons, ecc_corrected_aggregate, ecc_uncorrected_aggregate,
remapped_rows_corrected, remapped_rows_uncorrected"""
_SERIES_SQL: Final = f"""
{host_rows("gpu_samples", "ts", _SERIES_COLUMNS)}
SELECT {BUCKET} AS b,
       avg(utilization_gpu_percent), avg(memory_used_bytes) / 1073741824.0, avg(temperature_celsius),
       avg(power_watts), avg(sm_clock_mhz), bit_or(coalesce(clocks_event_reasons, 0)),
       max(ecc_corrected_aggregate), max(ecc_uncorrected_aggregate), max(remapped_rows_corrected),
       max(remapped_rows_uncorrected)
FROM host_rows WHERE uuid = ?
GROUP BY b ORDER BY b
"""


def bucket_seconds(window_seconds: float, minimum: float = 1.0) -> float:
    """A bucket that keeps a plot at most MAX_SERIES_POINTS wide, in whole seconds."""
    return max(minimum, float(int(window_seconds / MAX_SERIES_POINTS) or 1))


# The controller's rollups (docs/controller.md): averages weighted by samples, maxima, OR of the bits. They
# hold no aggregate ECC or remapped-row counts: the volatile ECC maxima stand in and rows stay empty.
_ROLLUP_SERIES_SQL: Final = """
{rows}
SELECT epoch(time_bucket(to_microseconds(CAST(CAST(? AS DOUBLE) * 1000000 AS BIGINT)), bucket)) AS b,
       sum(utilization_gpu_avg * samples) / sum(samples), max(memory_used_bytes_max) / 1073741824.0,
       sum(temperature_celsius_avg * samples) / sum(samples), sum(power_watts_avg * samples) / sum(samples),
       sum(sm_clock_mhz_avg * samples) / sum(samples), bit_or(coalesce(clocks_event_reasons_any, 0)),
       max(ecc_corrected_volatile_max), max(ecc_uncorrected_volatile_max), NULL, NULL
FROM host_rows WHERE uuid = ?
GROUP BY b ORDER BY b
"""
_ROLLUP_COLUMNS: Final = """bucket, uuid, samples, utilization_gpu_avg, memory_used_bytes_max,
temperature_celsius_avg, power_watts_avg, sm_clock_mhz_avg, clocks_event_reasons_any,
ecc_corrected_volatile_max, ecc_uncorrected_volatile_max"""
HOURLY_FROM_SECONDS: Final = 6 * 3600.0


def series_source(present: set[str], window_seconds: float) -> str:
    """Which table a GPU's series over `window_seconds` is read from: up to 6 h the raw samples (the
    finest detail, a time-bounded read), beyond it the controller's 1-hour rollup where it keeps one. Picking
    one GPU out of a day of the 1-minute rollup reads 16,384 GPUs' rows: slower than either."""
    if window_seconds > HOURLY_FROM_SECONDS and "gpu_rollup_1h" in present:
        return "gpu_rollup_1h"
    return "gpu_samples"


def gpu_series(
    cur: Cursor, uuid: str, host: str, since: float, until: float, source: str = "gpu_samples"
) -> GpuSeries:
    """The GPU's series from `source` (series_source), read among its host's rows (`host`: where it
    reports, `gpu_now`), falling back to raw samples when the rollup has no rows for it (an `up` store:
    only the controller writes rollups)."""
    bucket = bucket_seconds(until - since)
    if source != "gpu_samples":
        sql = _ROLLUP_SERIES_SQL.format(rows=host_rows(source, "bucket", _ROLLUP_COLUMNS))
        width = max(bucket, 3600.0 if source.endswith("1h") else 60.0)
        rows = fetch(cur, sql, [since, until, host, width, uuid])
        if rows:
            return _series(rows, "volatile, max per bucket", source)
    return _series(fetch(cur, _SERIES_SQL, [since, until, host, bucket, uuid]), "aggregate", "gpu_samples")


def _series(rows: list[Row], ecc_scope: str, source: str) -> GpuSeries:
    cols = list(zip(*rows, strict=True)) if rows else [()] * 11
    return GpuSeries(
        ts=[float(v) for v in cols[0]],
        utilization_gpu_percent=[as_float(v) for v in cols[1]],
        memory_used_gib=[as_float(v) for v in cols[2]],
        temperature_celsius=[as_float(v) for v in cols[3]],
        power_watts=[as_float(v) for v in cols[4]],
        sm_clock_mhz=[as_float(v) for v in cols[5]],
        throttle_reasons=[as_int(v) for v in cols[6]],
        ecc_corrected_aggregate=[None if v is None else int(v) for v in cols[7]],
        ecc_uncorrected_aggregate=[None if v is None else int(v) for v in cols[8]],
        remapped_rows_corrected=[None if v is None else int(v) for v in cols[9]],
        remapped_rows_uncorrected=[None if v is None else int(v) for v in cols[10]],
        ecc_scope=ecc_scope,
        source=source,
    )


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    host: str
    gpu_index: int
    uuid: str
    name: str | None
    serial: str | None
    pci_bus_id: str | None
    driver_version: str | None
    last_ts: float


@dataclass(frozen=True, slots=True)
class GpuNow:
    """What one GPU's page shows of it now: who it is and, if it sampled within the live window, its
    newest values."""

    identity: GpuIdentity
    state: GpuState | None


# One GPU's newest sample in a window: its newest values as they were sent, NULLs kept (GpuState's columns,
# in its order), then who it is (the newest non-NULL of each identity field). One read: picking one uuid out
# of a window reads every GPU's rows there, so two reads (who, then what) cost twice.
_NOW_COLUMNS: Final = """
SELECT host, gpu_index, uuid, epoch(max(ts)), arg_max(name, ts),
       arg_max_null(utilization_gpu_percent, ts), coalesce(arg_max_null(memory_used_bytes, ts), 0),
       coalesce(arg_max_null(memory_total_bytes, ts), 0), arg_max_null(temperature_celsius, ts),
       arg_max_null(power_watts, ts), coalesce(arg_max_null(sm_clock_mhz, ts), 0),
       coalesce(arg_max_null(clocks_event_reasons, ts), 0),
       coalesce(arg_max_null(ecc_corrected_volatile, ts), 0),
       coalesce(arg_max_null(ecc_uncorrected_volatile, ts), 0),
       coalesce(arg_max_null(remapped_rows_pending, ts), false),
       coalesce(arg_max_null(remapped_rows_failure, ts), false), arg_max(pci_bus_id, ts),
       arg_max(serial, ts), arg_max(driver_version, ts)
"""
_NOW_READS: Final = """ts, host, gpu_index, uuid, name, utilization_gpu_percent, memory_used_bytes,
memory_total_bytes, temperature_celsius, power_watts, sm_clock_mhz, clocks_event_reasons,
ecc_corrected_volatile, ecc_uncorrected_volatile, remapped_rows_pending, remapped_rows_failure, pci_bus_id,
serial, driver_version"""
_NOW_TAIL: Final = "GROUP BY host, gpu_index, uuid ORDER BY max(ts) DESC LIMIT 1"
_NOW_SQL: Final = f"{_NOW_COLUMNS} FROM gpu_samples WHERE ts >= {TS} AND ts <= {TS} AND uuid = ? {_NOW_TAIL}"
_NOW_ON_HOST_SQL: Final = (
    f"{host_rows('gpu_samples', 'ts', '*')} {_NOW_COLUMNS} FROM host_rows WHERE uuid = ? {_NOW_TAIL}"
)
_STATE_COLUMNS: Final = len(GpuState.__dataclass_fields__)


def gpu_now(cur: Cursor, uuid: str, since: float, until: float, host: str | None = None) -> GpuNow | None:
    """The GPU as of `until`: looked up in the live window first (a reporting GPU is found there, reading
    little, with its state), then back to `since` (a silent GPU: who it was, no state); None if it has no
    sample since `since`. `host`, where the GPU is thought to report (the fleet model's word), is looked in
    first, reading far less; a GPU not found there is looked for everywhere."""
    live_since = max(since, until - LIVE_WINDOW_SECONDS)
    rows: list[Row] = []
    if host is not None:
        rows = fetch(cur, _NOW_ON_HOST_SQL, [live_since, until, host, uuid])
    if not rows:
        rows = fetch(cur, _NOW_SQL, [live_since, until, uuid])
    live = bool(rows)
    if not rows and since < live_since:
        rows = fetch(cur, _NOW_SQL, [since, until, uuid])
    if not rows:
        return None
    r = rows[0]
    state = GpuState(*r[:_STATE_COLUMNS])
    serial, driver = r[_STATE_COLUMNS:]
    identity = GpuIdentity(
        state.host, state.gpu_index, state.uuid, state.name, serial, state.pci_bus_id, driver, state.last_ts
    )
    return GpuNow(identity, state if live else None)
