"""Bootstrap intervals: they hold the point estimate, narrow with more data, and the verdict says when a
difference from the static baseline is inside the noise."""

from __future__ import annotations

import numpy as np

from predictor.metrics import Scored, precision_of
from predictor.uncertainty import Resampling, bootstrap, verdict

DAY = 86400.0
T0 = 1_700_006_400.0  # a day boundary


def _scored(devices: int, days: int, fail_share: float, seed: int) -> Scored:
    """One instance per device and day; a failing device fails on its last day and is labelled 1 before."""
    rng = np.random.default_rng(seed)
    dev = np.repeat(np.arange(devices), days)
    day = np.tile(np.arange(days), devices)
    fails = rng.random(devices) < fail_share
    fail_day = np.where(fails, rng.integers(days // 2, days, devices), 10**6)
    label = (fails[dev] & (day <= fail_day[dev]) & (day >= fail_day[dev] - 3)).astype(np.float64)
    ts = (T0 + day * DAY).astype(np.float64)
    return Scored(
        period=day.astype(np.int64),
        device_id=np.array([f"d{d}" for d in dev], dtype=object),
        ts=ts,
        label=label,
        next_failure_ts=np.where(fails[dev], T0 + fail_day[dev] * DAY + 1.0, np.nan),
        period_starts=T0 + DAY * np.arange(days, dtype=np.float64),
        period_seconds=DAY,
        failures_device=np.array([f"d{d}" for d in np.flatnonzero(fails)], dtype=object),
        failures_ts=T0 + fail_day[fails] * DAY + 1.0,
    )


def _pick(scored: Scored, skill: float, k: int, seed: int) -> np.ndarray:
    """K per day, ranked by a noisy score whose signal is `skill`."""
    rng = np.random.default_rng(seed)
    score = skill * scored.label + rng.random(len(scored.label))
    out = []
    for p in np.unique(scored.period):
        idx = np.flatnonzero(scored.period == p)
        out.extend(idx[np.argsort(-score[idx])[:k]].tolist())
    return np.sort(np.asarray(out, dtype=np.int64))


def test_intervals_hold_the_estimate_and_the_same_selection_has_ratio_one() -> None:
    scored = _scored(300, 20, 0.1, seed=0)
    chosen = _pick(scored, 0.8, 5, seed=1)
    p = precision_of(scored, chosen)
    assert p is not None
    for r in Resampling:
        iv = bootstrap(scored, chosen, chosen, r)
        assert iv.precision.contains(p)
        assert iv.ratio_to_static.low == iv.ratio_to_static.high == 1.0
        assert bootstrap(scored, chosen, chosen, r).as_dict() == iv.as_dict()  # seeded: reproducible


def test_a_real_difference_is_told_from_noise_only_with_enough_data() -> None:
    big = _scored(2000, 30, 0.1, seed=2)
    strong, weak = _pick(big, 1.5, 20, seed=3), _pick(big, 0.1, 20, seed=4)
    by = {r: bootstrap(big, strong, weak, r) for r in Resampling}
    ratio = precision_of(big, strong) / precision_of(big, weak)  # type: ignore[operator]
    assert ratio > 2 and "beyond the noise" in verdict(ratio, by)

    small = _scored(60, 10, 0.1, seed=5)
    a, b = _pick(small, 0.3, 2, seed=6), _pick(small, 0.2, 2, seed=7)
    by_small = {r: bootstrap(small, a, b, r) for r in Resampling}
    pa, pb = precision_of(small, a), precision_of(small, b)
    assert pa is not None and pb is not None and pa != pb  # a difference (0.30 vs 0.40) ...
    assert "inside the noise" in verdict(pa / pb, by_small)  # ... that 60 devices cannot tell from noise
    dev = by_small[Resampling.DEVICES].precision
    assert dev.low is not None and dev.high is not None
    big_dev = by[Resampling.DEVICES].precision
    assert big_dev.low is not None and big_dev.high is not None
    assert (big_dev.high - big_dev.low) < (dev.high - dev.low)  # more devices, a narrower interval


def test_verdict_without_a_ratio_says_so() -> None:
    assert "no ratio" in verdict(None, {})
