"""Backtest settings that fit the data, and refusals that say what would work.

A backtest needs, in order: a training window L_train (longer than the horizon H, since a negative's label
is known only H after it), then H before the first scored instance (so the first model's newest labels are
known), then the scored periods, each of whose instances needs H after it before its outcome is known. So
the history must span at least L_train + 2H + one step; what is not training or horizon is scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from predictor.durations import format_duration

DAY = 86400.0
DEFAULT_HORIZON = 7 * DAY
MAX_TRAIN_WINDOW = 30 * DAY
MAX_RETRAIN_EVERY = 7 * DAY


@dataclass(frozen=True)
class Settings:
    """The backtest's durations (seconds) and which of them were derived rather than given."""

    horizon: float
    train_window: float
    retrain_every: float
    step: float
    derived: tuple[str, ...]

    def describe(self, span: float, extra: str = "") -> str:
        given = {
            "horizon": self.horizon,
            "train-window": self.train_window,
            "retrain-every": self.retrain_every,
        }
        parts = [f"--{k} {format_duration(v)}" for k, v in given.items() if k in self.derived]
        return (
            f"{_span_words(span, self.step)}: using {' '.join(parts)}{extra} (derived from the data; give "
            "them to override)"
        )


def _floor_to(value: float, unit: float) -> float:
    return math.floor(value / unit + 1e-9) * unit


def _span_words(span: float, step: float) -> str:
    if step >= DAY and step % DAY == 0:
        unit = "daily" if step == DAY else f"{format_duration(step)}-step"
        return f"{span / DAY:.0f} days of {unit} data"
    length = format_duration(_floor_to(span, step)) if span >= step else f"{span:g}s"
    return f"{length} of {format_duration(step)}-step data"


def derive(
    span: float,
    step: float,
    horizon: float | None,
    train_window: float | None,
    retrain_every: float | None,
) -> Settings:
    """Fill in what was not given: H 7 days (at most a sixth of the span), L_train about two thirds of what
    the two horizons leave (at most 30 days, at least H + one step), retrain so the scored part sees about
    eight retrains (one step to 7 days). Raises ValueError, naming settings that would fit, when none do."""
    derived = []
    if horizon is None:
        horizon = max(step, min(DEFAULT_HORIZON, _floor_to(span / 6, step)))
        derived.append("horizon")
    room = span - 2 * horizon - step  # what training and scoring share
    if train_window is None:
        train_window = min(MAX_TRAIN_WINDOW, max(horizon + step, _floor_to(room * 2 / 3, step)))
        derived.append("train-window")
    scored = span - 2 * horizon - train_window
    if retrain_every is None:
        retrain_every = min(MAX_RETRAIN_EVERY, max(step, _floor_to(max(scored, step) / 8, step)))
        derived.append("retrain-every")
    settings = Settings(horizon, train_window, retrain_every, step, tuple(derived))
    check(span, settings)
    return settings


def check(span: float, s: Settings) -> None:
    """Refuse settings that cannot give a backtest, with the reason and settings that would."""
    if s.train_window <= s.horizon:
        raise ValueError(
            f"--train-window {format_duration(s.train_window)} is not longer than --horizon "
            f"{format_duration(s.horizon)}: labels of negatives are known only H after the sample, so a "
            "train window shorter than H has no negatives; "
            f"try --train-window {format_duration(s.horizon * 2)}"
        )
    if span - 2 * s.horizon - s.train_window < s.step:
        raise ValueError(f"history too short for a backtest: {suggest(span, s.step, s.horizon)}")


def suggest(span: float, step: float, horizon: float) -> str:
    """What fits `span`: an L_train that leaves scored days, or a shorter horizon when none does."""
    room = span - 2 * horizon - step
    words = _span_words(span, step)
    need = f"(need train window + 2 x horizon + one step; horizon {format_duration(horizon)})"
    if room > horizon + step:
        train = max(horizon + step, _floor_to(room * 2 / 3, step))
        retrain = max(step, min(MAX_RETRAIN_EVERY, _floor_to((span - 2 * horizon - train) / 8, step)))
        tries = f"--train-window {format_duration(train)} --retrain-every {format_duration(retrain)}"
        return f"{words}: try {tries} {need}"
    shorter = _floor_to(span / 6, step)
    if shorter >= step:
        return f"{words}: try --horizon {format_duration(shorter)} (with the derived train window) {need}"
    return f"{words} is too little for any backtest {need}"


def explain_one_class(at: float, positives: int, rows: int, window: float, horizon: float) -> str:
    """Why a training set has only one class, and what would give it both."""
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M")
    head = f"training set before {when} has {positives} positives of {rows}"
    if rows == 0:
        return f"{head}: no instance with a known label in the train window; try a longer --train-window"
    if positives == 0:
        return (
            f"{head}: no failure within the horizon of any instance of the last {format_duration(window)}; "
            f"try a longer --train-window (e.g. {format_duration(window * 2)}) or a longer --horizon"
        )
    return (
        f"{head}: no negatives, because labels of negatives are known only H = {format_duration(horizon)} "
        f"after the sample, so a train window ({format_duration(window)}) not much longer than H has none; "
        f"try --train-window {format_duration(window + horizon)} or a shorter --horizon"
    )
