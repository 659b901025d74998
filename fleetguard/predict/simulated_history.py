"""Vectorised generator of long per-GPU telemetry histories with failures and known ground truth.

It writes the failure predictor's input contract (samples: device_id, ts, numeric columns; failures:
device_id, ts, kind) for tests, the demo model and the scale benchmarks. A share of the GPUs degrade before
failing, with one of several precursor patterns; some fail with no warning; healthy GPUs carry confounding
noise; half way through, a new batch of GPUs arrives and a driver change shifts the baselines and the mix of
failure patterns, so a model trained once on the first months drifts.

It makes no `GpuSample`s (those come from a `GpuDevice` through collectors.gpu_sampling, as
fleetguard.incidents.simulated_history's do): it writes the predictor's columns directly, a whole fleet's
steps at a time, which is what lets the scale benchmarks generate 10^8 rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

PATTERNS = ("ecc_ramp", "thermal_drift", "power_instability", "nvlink_errors", "sudden")
# Pattern mix before and after the fleet change (the new batch and driver fail differently).
_MIX_BEFORE = np.array([0.40, 0.30, 0.08, 0.07, 0.15])
_MIX_AFTER = np.array([0.08, 0.10, 0.35, 0.32, 0.15])
_FAILURE_KINDS = ("xid_79", "xid_48", "gpu_fallen_off_bus", "xid_95")
# Static attributes (text columns: the predictor's categorical features). The first fleet is a mix of SKUs,
# one of which fails twice as often; the new batch is one newer SKU. The driver changes at the fleet change.
SKUS = ("H100-SXM5-80GB", "H100-PCIE-80GB", "A100-SXM4-80GB")
_SKU_WEIGHTS = np.array([0.5, 0.3, 0.2])
NEW_BATCH_SKU = "H200-SXM5-141GB"
DRIVERS = ("535.104.05", "550.54.15")

SAMPLE_COLUMNS = (
    "temperature_celsius",
    "power_watts",
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate",
    "remapped_rows_corrected",
    "pcie_replay_errors",
    "nvlink_crc_flit_errors",
    "xid_count",
)


@dataclass(frozen=True)
class HistorySpec:
    """Shape of a simulated fleet history."""

    n_gpus: int = 200
    n_steps: int = 24 * 60  # samples per GPU
    step_seconds: float = 3600.0
    start_ts: float = 1_700_000_000.0
    failure_rate: float = 0.12  # expected failures per GPU over the whole history
    repeat_failure_share: float = 0.25  # share of failed GPUs that are repaired and fail again
    new_batch_share: float = 0.3  # GPUs that only appear at the fleet change, half way
    weak_sku_factor: float = 2.0  # failure rate of the last SKU relative to the others
    seed: int = 0
    # The fleet's healthy operating point (per-GPU baselines drawn around these): the defaults are a mixed,
    # partly idle fleet; the demo model uses the simulated H100 fleet's (busy, ~600 W, ~65 C).
    utilization_mean: float = 70.0
    utilization_sd: float = 25.0
    temperature_base_mean: float = 55.0
    temperature_base_sd: float = 6.0
    power_base_mean: float = 280.0
    power_base_sd: float = 40.0

    @property
    def change_ts(self) -> float:
        return self.start_ts + self.step_seconds * (self.n_steps // 2)

    @property
    def end_ts(self) -> float:
        return self.start_ts + self.step_seconds * self.n_steps


@dataclass(frozen=True)
class FailureTruth:
    """Every failure with its precursor pattern and onset (ground truth for tests)."""

    device_id: npt.NDArray[np.str_]
    ts: npt.NDArray[np.float64]
    kind: npt.NDArray[np.str_]
    pattern: npt.NDArray[np.str_]
    onset_ts: npt.NDArray[np.float64]


def device_ids(indices: npt.NDArray[np.int64]) -> npt.NDArray[np.str_]:
    return np.char.add("gpu-", np.char.zfill(indices.astype(str), 6))


def simulate_failures(spec: HistorySpec) -> FailureTruth:
    """Draw every GPU's failures (times, kinds, patterns, precursor onsets) from the spec's seed."""
    rng = np.random.default_rng([spec.seed, 1])
    n = spec.n_gpus
    first_step = _first_steps(spec)
    weak = (_sku_index(spec) == len(SKUS) - 1) & ~_is_new(spec)
    factor = np.where(weak, spec.weak_sku_factor, 1.0)
    fails = rng.random(n) < spec.failure_rate * factor
    repeat = fails & (rng.random(n) < spec.repeat_failure_share)
    dev: list[npt.NDArray[np.int64]] = []
    step: list[npt.NDArray[np.int64]] = []
    for wave, mask in enumerate((fails, repeat)):
        idx = np.flatnonzero(mask)
        lo = first_step[idx] + 48 + wave * (spec.n_steps // 3)
        ok = lo < spec.n_steps - 1
        idx, lo = idx[ok], lo[ok]
        dev.append(idx)
        step.append(rng.integers(lo, spec.n_steps))
    d = np.concatenate(dev).astype(np.int64)
    s = np.concatenate(step).astype(np.int64)
    order = np.lexsort((s, d))
    d, s = d[order], s[order]
    # Two failures of one GPU closer than a week merge into one.
    keep = np.ones(len(d), dtype=bool)
    keep[1:] = ~((d[1:] == d[:-1]) & (s[1:] - s[:-1] < 24 * 7))
    d, s = d[keep], s[keep]
    ts = np.asarray(spec.start_ts + s * spec.step_seconds, dtype=np.float64)
    after = ts >= spec.change_ts
    u = rng.random(len(d))
    pattern_idx = np.where(
        after,
        np.searchsorted(np.cumsum(_MIX_AFTER), u * _MIX_AFTER.sum()),
        np.searchsorted(np.cumsum(_MIX_BEFORE), u * _MIX_BEFORE.sum()),
    )
    lead_hours = rng.uniform(24, 24 * 8, len(d))
    return FailureTruth(
        device_id=device_ids(d),
        ts=ts,
        kind=np.array(_FAILURE_KINDS)[rng.integers(0, len(_FAILURE_KINDS), len(d))],
        pattern=np.array(PATTERNS)[pattern_idx],
        onset_ts=ts - lead_hours * 3600.0,
    )


def _sku_index(spec: HistorySpec) -> npt.NDArray[np.int64]:
    """Each GPU's SKU among SKUS (its own random stream, so adding it moved no other draw)."""
    u = np.random.default_rng([spec.seed, 3]).random(spec.n_gpus)
    return np.asarray(np.searchsorted(np.cumsum(_SKU_WEIGHTS), u * _SKU_WEIGHTS.sum()), dtype=np.int64)


def gpu_skus(spec: HistorySpec) -> npt.NDArray[np.str_]:
    return np.where(_is_new(spec), NEW_BATCH_SKU, np.array(SKUS)[_sku_index(spec)])


def _is_new(spec: HistorySpec) -> npt.NDArray[np.bool_]:
    return np.asarray(_first_steps(spec) > 0)


def _first_steps(spec: HistorySpec) -> npt.NDArray[np.int64]:
    """Step at which each GPU starts reporting: the new batch joins at the fleet change."""
    n_new = int(spec.n_gpus * spec.new_batch_share)
    first = np.zeros(spec.n_gpus, dtype=np.int64)
    first[spec.n_gpus - n_new :] = spec.n_steps // 2
    return first


def iter_sample_chunks(
    spec: HistorySpec, truth: FailureTruth, gpus_per_chunk: int = 2000
) -> Iterator[pa.Table]:
    """Yield the samples as Arrow tables, one per block of GPUs, so 100M+ rows never sit in memory at once."""
    dev_index = np.array([int(x[4:]) for x in truth.device_id], dtype=np.int64)
    for lo in range(0, spec.n_gpus, gpus_per_chunk):
        hi = min(spec.n_gpus, lo + gpus_per_chunk)
        sel = (dev_index >= lo) & (dev_index < hi)
        yield _chunk(
            spec, lo, hi, dev_index[sel] - lo, truth.ts[sel], truth.onset_ts[sel], truth.pattern[sel]
        )


def _chunk(
    spec: HistorySpec,
    lo: int,
    hi: int,
    f_dev: npt.NDArray[np.int64],
    f_ts: npt.NDArray[np.float64],
    f_onset: npt.NDArray[np.float64],
    f_pattern: npt.NDArray[np.str_],
) -> pa.Table:
    g, t_n = hi - lo, spec.n_steps
    rng = np.random.default_rng([spec.seed, 2, lo])
    ts = spec.start_ts + np.arange(t_n, dtype=np.float64) * spec.step_seconds
    after = (ts >= spec.change_ts)[None, :].astype(np.float32)
    # Precursor intensity per pattern: ramps from 0 at onset to 1 at the failure.
    ramp = {p: np.zeros((g, t_n), dtype=np.float32) for p in PATTERNS}
    down = np.zeros((g, t_n), dtype=bool)
    for d, ft, on, pat in zip(f_dev, f_ts, f_onset, f_pattern, strict=True):
        a = int(np.searchsorted(ts, on))
        b = int(np.searchsorted(ts, ft))
        strength = 0.6 + 0.8 * rng.random()
        if b > a:
            ramp[str(pat)][d, a:b] = np.maximum(
                ramp[str(pat)][d, a:b], strength * np.linspace(0.0, 1.0, b - a, dtype=np.float32) ** 1.5
            )
        down[d, b : b + 24] = True  # out for repair for a day after each failure
    temp_base = rng.normal(spec.temperature_base_mean, spec.temperature_base_sd, (g, 1)).astype(np.float32)
    power_base = rng.normal(spec.power_base_mean, spec.power_base_sd, (g, 1)).astype(np.float32)
    util = np.clip(rng.normal(spec.utilization_mean, spec.utilization_sd, (g, t_n)), 0, 100).astype(
        np.float32
    )
    temperature = (
        temp_base + 0.15 * util + 5.0 * after + rng.normal(0, 2.0, (g, t_n)) + 18.0 * ramp["thermal_drift"]
    )
    power_noise = rng.normal(0, 1, (g, t_n)).astype(np.float32) * (8.0 + 90.0 * ramp["power_instability"])
    power = (power_base + 1.5 * util) * (1.0 + 0.1 * after) + power_noise
    mem_util = np.clip(0.6 * util + rng.normal(0, 10, (g, t_n)), 0, 100)
    # Healthy noise: some GPUs have chatty ECC or flaky links but never fail (confounders for the models).
    chatty_ecc = (rng.random((g, 1)) < 0.05) * rng.uniform(0.5, 3.0, (g, 1))
    flaky_link = (rng.random((g, 1)) < 0.05) * rng.uniform(0.5, 4.0, (g, 1))
    ecc_rate = 0.02 + chatty_ecc + 40.0 * ramp["ecc_ramp"] ** 2
    ecc_corr = np.cumsum(rng.poisson(ecc_rate), axis=1)
    ecc_unc = np.cumsum(rng.poisson(0.0005 + 0.4 * ramp["ecc_ramp"] ** 3), axis=1)
    remapped = np.cumsum(rng.poisson(0.001 + 1.0 * ramp["ecc_ramp"] ** 3), axis=1)
    pcie = np.cumsum(rng.poisson(0.05 + 3.0 * ramp["power_instability"]), axis=1)
    nvlink = np.cumsum(rng.poisson(0.05 + flaky_link + 30.0 * ramp["nvlink_errors"]), axis=1)
    xid = rng.poisson(0.002 + 0.3 * ramp["nvlink_errors"] + 0.2 * ramp["ecc_ramp"])
    present = ~down
    present &= np.arange(t_n)[None, :] >= _first_steps(spec)[lo:hi, None]
    rows, cols = np.nonzero(present)
    ids = device_ids(np.arange(lo, hi, dtype=np.int64))
    skus = gpu_skus(spec)[lo:hi]
    drivers = np.array(DRIVERS)[(ts >= spec.change_ts).astype(np.int64)]
    return pa.table(
        {
            "device_id": pa.array(ids[rows]),
            "ts": pa.array(ts[cols]),
            "temperature_celsius": temperature[rows, cols].astype(np.float32),
            "power_watts": power[rows, cols].astype(np.float32),
            "utilization_gpu_percent": util[rows, cols],
            "utilization_memory_percent": mem_util[rows, cols].astype(np.float32),
            "ecc_corrected_aggregate": ecc_corr[rows, cols],
            "ecc_uncorrected_aggregate": ecc_unc[rows, cols],
            "remapped_rows_corrected": remapped[rows, cols],
            "pcie_replay_errors": pcie[rows, cols],
            "nvlink_crc_flit_errors": nvlink[rows, cols],
            "xid_count": xid[rows, cols],
            "sku": pa.array(skus[rows]),
            "driver_version": pa.array(drivers[cols]),
        }
    )


def failures_table(truth: FailureTruth) -> pa.Table:
    return pa.table({"device_id": truth.device_id, "ts": truth.ts, "kind": truth.kind})


def generate(spec: HistorySpec) -> tuple[pa.Table, pa.Table, FailureTruth]:
    """The whole history in memory: (samples, failures, truth); for big fleets use write_parquet."""
    truth = simulate_failures(spec)
    samples = pa.concat_tables(list(iter_sample_chunks(spec, truth)))
    return samples, failures_table(truth), truth


def write_parquet(
    spec: HistorySpec,
    out_dir: Path,
    gpus_per_chunk: int = 2000,
    keep_columns: frozenset[str] | None = None,
) -> tuple[Path, Path, int]:
    """Write samples/part-NNNNN.parquet (one per GPU block) and failures.parquet; returns paths, rows.
    With `keep_columns`, the samples hold device_id, ts and only those of the generated columns (the
    columns of fleetguard's store, say, so a model trained on them can score a store)."""
    truth = simulate_failures(spec)
    sample_dir = out_dir / "samples"
    sample_dir.mkdir(parents=True, exist_ok=True)
    rows = 0
    for i, chunk in enumerate(iter_sample_chunks(spec, truth, gpus_per_chunk)):
        if keep_columns is not None:
            chunk = chunk.select([c for c in chunk.column_names if c in {"device_id", "ts", *keep_columns}])
        pq.write_table(chunk, sample_dir / f"part-{i:05d}.parquet", row_group_size=1_000_000)
        rows += chunk.num_rows
    failures = out_dir / "failures.parquet"
    pq.write_table(failures_table(truth), failures)
    return sample_dir, failures, rows
