"""The network page's link-down chart drawn in HTML: a column per bucket of the window, zero or not."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from dashboard.column_chart import MAX_COLUMNS, bucket_starts, column_chart

DAY = 86400.0
T = 1_800_000_000.0  # a multiple of 900 s


def _columns(chart: Any) -> list[Any]:
    slot = chart.children
    _top, plot, _axis = slot.children
    return list(plot.children)


def test_a_day_in_quarter_hours_is_97_buckets_ending_in_the_one_holding_now() -> None:
    starts = bucket_starts(T - DAY + 100, T + 100, 900.0)
    assert len(starts) == 97 and starts[0] == T - DAY and starts[-1] == T
    assert all(b - a == 900.0 for a, b in pairwise(starts))


def test_a_window_is_cut_into_at_most_max_columns_the_newest_kept() -> None:
    starts = bucket_starts(T - 10 * DAY, T, 60.0)
    assert len(starts) == MAX_COLUMNS and starts[-1] == T
    assert bucket_starts(T, T - 1, 60.0) == [] and bucket_starts(T, T, 0.0) == []


def test_each_column_is_as_tall_as_its_share_and_says_its_bucket_and_count() -> None:
    starts = bucket_starts(T - 3600, T, 900.0)  # 5 buckets
    chart = column_chart({starts[1]: 2, starts[3]: 8}, starts, 900.0, "c", colour="red", what="events")
    columns = _columns(chart)
    assert len(columns) == 5
    heights = [c.children.style["height"] for c in columns]
    assert heights == ["0.0%", "25.0%", "0.0%", "100.0%", "0.0%"]
    assert columns[3].title.endswith("UTC: 8 events")
    assert columns[0].title.endswith("UTC: 0 events")


def test_an_empty_window_draws_no_column_and_no_axis() -> None:
    chart = column_chart({}, [], 900.0, "c", colour="red", what="events")
    assert _columns(chart) == []
