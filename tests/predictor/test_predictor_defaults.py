"""Settings derived from the data's span and step, and refusals that say what would work."""

from __future__ import annotations

import pytest

from predictor.defaults import Settings, check, derive, explain_one_class

DAY = 86400.0


def test_forty_days_of_daily_data_get_a_backtest_that_fits() -> None:
    s = derive(40 * DAY, DAY, None, None, None)
    assert s.horizon == 6 * DAY or s.horizon == 7 * DAY
    assert s.train_window > s.horizon
    assert 40 * DAY - 2 * s.horizon - s.train_window >= DAY  # something is scored
    assert set(s.derived) == {"horizon", "train-window", "retrain-every"}
    assert "40 days of daily data" in s.describe(40 * DAY)


def test_given_settings_are_kept() -> None:
    s = derive(120 * DAY, DAY, 7 * DAY, 30 * DAY, 7 * DAY)
    assert (s.horizon, s.train_window, s.retrain_every, s.derived) == (7 * DAY, 30 * DAY, 7 * DAY, ())


def test_a_too_long_train_window_is_refused_with_one_that_fits() -> None:
    with pytest.raises(ValueError) as info:
        derive(40 * DAY, DAY, 7 * DAY, 30 * DAY, 7 * DAY)
    text = str(info.value)
    assert "40 days of daily data: try --train-window" in text and "--retrain-every" in text
    suggested = float(text.split("--train-window ")[1].split("d")[0]) * DAY
    check(40 * DAY, Settings(7 * DAY, suggested, DAY, DAY, ()))  # the suggestion itself fits


def test_a_train_window_shorter_than_the_horizon_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="labels of negatives are known only H after the sample"):
        derive(200 * DAY, DAY, 90 * DAY, 30 * DAY, None)


def test_one_class_training_sets_say_which_class_is_missing() -> None:
    assert "no negatives" in explain_one_class(0.0, 3, 3, 100 * DAY, 90 * DAY)
    assert "no failure" in explain_one_class(0.0, 0, 50, 10 * DAY, 7 * DAY)
