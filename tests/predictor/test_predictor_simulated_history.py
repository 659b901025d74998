"""The simulated fleet history: deterministic, with known failures whose precursors show in the data."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from fleetguard.predict.simulated_history import HistorySpec, generate, simulate_failures

SPEC = HistorySpec(n_gpus=200, n_steps=24 * 40, failure_rate=0.4, seed=3)


def test_same_seed_same_history() -> None:
    a, fa, _ = generate(SPEC)
    b, fb, _ = generate(SPEC)
    assert a.equals(b) and fa.equals(fb)


def test_some_gpus_fail_more_than_once() -> None:
    truth = simulate_failures(HistorySpec(n_gpus=2000, n_steps=24 * 90, failure_rate=0.3, seed=1))
    _, counts = np.unique(truth.device_id, return_counts=True)
    assert counts.max() >= 2


def test_precursors_start_before_their_failure_with_diverse_patterns() -> None:
    truth = simulate_failures(HistorySpec(n_gpus=3000, n_steps=24 * 60, seed=2))
    assert np.all(truth.onset_ts < truth.ts)
    assert len(set(truth.pattern.tolist())) == 5


def test_pattern_mix_changes_after_the_fleet_change() -> None:
    spec = HistorySpec(n_gpus=5000, n_steps=24 * 60, seed=4)
    truth = simulate_failures(spec)
    late = truth.ts >= spec.change_ts
    assert np.mean(truth.pattern[~late] == "ecc_ramp") > 2 * np.mean(truth.pattern[late] == "ecc_ramp")


def test_ecc_ramp_failures_show_rising_corrected_ecc_before_failing() -> None:
    samples, _, truth = generate(SPEC)
    i = int(np.flatnonzero(truth.pattern == "ecc_ramp")[0])
    dev = samples.filter(pc.equal(samples["device_id"], truth.device_id[i]))
    ts = dev["ts"].to_numpy()
    ecc = dev["ecc_corrected_aggregate"].to_numpy()
    before = (ts < truth.ts[i]) & (ts >= truth.ts[i] - 12 * 3600)
    calm = ts < truth.onset_ts[i] - 24 * 3600
    assert np.diff(ecc[before]).mean() > 5 * max(np.diff(ecc[calm]).mean(), 0.01)


def test_a_gpu_is_absent_for_a_day_after_failing() -> None:
    samples, _, truth = generate(SPEC)
    dev = samples.filter(pc.equal(samples["device_id"], truth.device_id[0]))
    ts = dev["ts"].to_numpy()
    assert not np.any((ts >= truth.ts[0]) & (ts < truth.ts[0] + 23 * 3600))
