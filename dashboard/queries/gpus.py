"""GPU queries: the latest state of every GPU, one GPU's time series and its memory-error history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import BUCKET, TS, Cursor, as_float, as_int, fetch

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


_LATEST_SQL: Final = f"""
SELECT host, gpu_index, uuid, epoch(max(ts)),
       arg_max(name, ts), arg_max(utilization_gpu_percent, ts), arg_max(memory_used_bytes, ts),
       arg_max(memory_total_bytes, ts), arg_max(temperature_celsius, ts), arg_max(power_watts, ts),
       arg_max(sm_clock_mhz, ts), arg_max(clocks_event_reasons, ts), arg_max(ecc_corrected_volatile, ts),
       arg_max(ecc_uncorrected_volatile, ts), arg_max(remapped_rows_pending, ts),
       arg_max(remapped_rows_failure, ts), arg_max(pci_bus_id, ts)
FROM gpu_samples
WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
GROUP BY host, gpu_index, uuid
ORDER BY host, gpu_index
"""


def latest_gpu_states(cur: Cursor, now: float, host: str | None = None) -> list[GpuState]:
    """Every GPU that sampled within the live window (of one host, or all), with its newest values."""
    rows = fetch(cur, _LATEST_SQL, [now - LIVE_WINDOW_SECONDS, now, host, host])
    return [
        GpuState(
            host=str(r[0]),
            gpu_index=int(r[1]),
            uuid=str(r[2]),
            last_ts=float(r[3]),
            name=r[4],
            utilization_gpu_percent=as_float(r[5]),
            memory_used_bytes=as_int(r[6]),
            memory_total_bytes=as_int(r[7]),
            temperature_celsius=as_float(r[8]),
            power_watts=as_float(r[9]),
            sm_clock_mhz=as_int(r[10]),
            clocks_event_reasons=as_int(r[11]),
            ecc_corrected_volatile=as_int(r[12]),
            ecc_uncorrected_volatile=as_int(r[13]),
            remapped_rows_pending=bool(r[14]),
            remapped_rows_failure=bool(r[15]),
            pci_bus_id=r[16],
        )
        for r in rows
    ]


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


_SERIES_SQL: Final = f"""
SELECT {BUCKET} AS b,
       avg(utilization_gpu_percent), avg(memory_used_bytes) / 1073741824.0, avg(temperature_celsius),
       avg(power_watts), avg(sm_clock_mhz), bit_or(coalesce(clocks_event_reasons, 0)),
       max(ecc_corrected_aggregate), max(ecc_uncorrected_aggregate), max(remapped_rows_corrected),
       max(remapped_rows_uncorrected)
FROM gpu_samples
WHERE ts >= {TS} AND ts <= {TS} AND uuid = ?
GROUP BY b ORDER BY b
"""


def bucket_seconds(window_seconds: float, minimum: float = 1.0) -> float:
    """A bucket that keeps a plot at most MAX_SERIES_POINTS wide, in whole seconds."""
    return max(minimum, float(int(window_seconds / MAX_SERIES_POINTS) or 1))


def gpu_series(cur: Cursor, uuid: str, since: float, until: float) -> GpuSeries:
    rows = fetch(cur, _SERIES_SQL, [bucket_seconds(until - since), since, until, uuid])
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


_IDENTITY_SQL: Final = f"""
SELECT host, gpu_index, uuid, arg_max(name, ts), arg_max(serial, ts), arg_max(pci_bus_id, ts),
       arg_max(driver_version, ts), epoch(max(ts))
FROM gpu_samples WHERE ts >= {TS} AND ts <= {TS} AND uuid = ?
GROUP BY host, gpu_index, uuid ORDER BY max(ts) DESC LIMIT 1
"""


def gpu_identity(cur: Cursor, uuid: str, since: float, until: float) -> GpuIdentity | None:
    rows = fetch(cur, _IDENTITY_SQL, [since, until, uuid])
    if not rows:
        return None
    r = rows[0]
    return GpuIdentity(str(r[0]), int(r[1]), str(r[2]), r[3], r[4], r[5], r[6], float(r[7]))
