"""Sliding training: the L_train pick validates on instances whose outcomes are known, before the period."""

from __future__ import annotations

import numpy as np

from predictor.dataset import Instances
from predictor.sliding import pick_train_window

DAY = 86400.0


def drifting_fleet(days: int = 80, devices: int = 300, drift_day: int = 50, seed: int = 3) -> Instances:
    """Daily instances (at noon); in the 3 days before a failure x0 is HIGH before `drift_day` and LOW from
    then on: only a short training window learns the fleet's new behaviour."""
    rng = np.random.default_rng(seed)
    dev, ts, x, nf = [], [], [], []
    for d in range(devices):
        fails_at = float(rng.integers(5, days + 20)) * DAY if rng.random() < 0.5 else np.nan
        for day in range(days):
            t = (day + 0.5) * DAY
            soon = not np.isnan(fails_at) and 0 <= fails_at - t <= 3 * DAY
            before = t < drift_day * DAY
            signal = (3.0 if before else -3.0) if soon else 0.0
            dev.append(f"d{d}")
            ts.append(t)
            x.append([signal + rng.normal(0, 1.0)])
            nf.append(fails_at if not np.isnan(fails_at) and fails_at >= t else np.nan)
    next_failure = np.asarray(nf)
    ts_arr = np.asarray(ts)
    label = np.where(next_failure < ts_arr + 7 * DAY, 1.0, 0.0)
    return Instances(
        device_id=np.asarray(dev, dtype=object),
        ts=ts_arr,
        label=label,
        next_failure_ts=next_failure,
        x=np.asarray(x, dtype=np.float32),
        feature_names=("x0",),
    )


def test_the_pick_prefers_the_window_that_has_learned_the_fleets_new_behaviour() -> None:
    inst = drifting_fleet()
    # at day 78 the validation slice is days 64-71 (after the drift, outcomes known); the 60-day window is
    # mostly old behaviour. A slice in the last 7 days would hold no known negative at all.
    picked = pick_train_window(
        inst, 78 * DAY, (60 * DAY, 14 * DAY), 7 * DAY, 7 * DAY, max_negatives=50_000, seed=0, n_jobs=1
    )
    assert picked == 14 * DAY


def test_no_pick_without_both_outcomes_in_the_validation_slice() -> None:
    inst = drifting_fleet()
    inst.label[:] = 0.0
    inst.next_failure_ts[:] = np.nan
    assert pick_train_window(inst, 78 * DAY, (60 * DAY, 7 * DAY), 7 * DAY, 7 * DAY, 50_000, 0, 1) is None
