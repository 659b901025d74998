"""The retrain gate: both models pick with the backtest's selection on the same out-of-time instances, the
serving model at the candidate's volume; promoted only when not worse."""

from __future__ import annotations

import numpy as np

from predictor.gate import GateFigures, Picks, Verdict, compare, decide

HOUR = 3600.0


def _instances(steps: int = 24, devices: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ts = np.repeat(np.arange(steps, dtype=np.float64) * HOUR, devices)
    dev = np.tile(np.array([f"g{i}" for i in range(devices)], dtype=object), steps)
    label = np.where(np.isin(dev, ["g1", "g2"]), 1.0, 0.0)  # g1 and g2 fail within the horizon
    return dev, ts, label


def test_a_candidate_that_ranks_the_failing_gpus_first_beats_one_that_does_not() -> None:
    dev, ts, label = _instances()
    good = label + np.linspace(0, 0.1, len(label))
    bad = 1.0 - label + np.linspace(0, 0.1, len(label))
    figures = compare(dev, ts, label, good, bad, k=2, period_seconds=24 * HOUR, step_seconds=HOUR)
    assert figures.current is not None
    assert figures.candidate.predictions == figures.current.predictions == 2  # K per period, equal volume
    assert figures.candidate.precision == 1.0 and figures.current.precision == 0.0
    assert decide(figures)[0] is Verdict.PROMOTE
    reverse = compare(dev, ts, label, bad, good, k=2, period_seconds=24 * HOUR, step_seconds=HOUR)
    verdict, reason = decide(reverse)
    assert verdict is Verdict.REJECT and "below the serving model's 1.000" in reason


def test_the_budget_is_spent_per_period_a_device_once() -> None:
    dev, ts, label = _instances(steps=48)
    figures = compare(dev, ts, label, label.copy(), label.copy(), 2, 24 * HOUR, HOUR)
    assert figures.candidate.predictions == 4 and figures.positives == int(label.sum())


def test_equal_precision_promotes_and_no_failures_or_no_picks_reject() -> None:
    def fig(cand: Picks, cur: Picks | None, positives: int = 3) -> GateFigures:
        return GateFigures(0.0, 1.0, 2, HOUR, 10, positives, cand, cur)

    assert decide(fig(Picks(4, 2), Picks(4, 2)))[0] is Verdict.PROMOTE
    assert decide(fig(Picks(4, 2), None, positives=0))[0] is Verdict.PROMOTE  # nothing serves
    assert decide(fig(Picks(4, 2), Picks(4, 2), positives=0))[0] is Verdict.REJECT
    assert decide(fig(Picks(0, 0), Picks(0, 0)))[0] is Verdict.REJECT
