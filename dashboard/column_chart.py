"""Counts per time bucket drawn in HTML, one column per bucket, for a page whose only other reason to load
plotly.js would be one chart of bars over time (see dashboard/bar_chart.py on what plotly.js costs a
first render). Every bucket of the window has its column, zero or not, so the time axis is even; each
column's tooltip names its bucket and count; the axis names the window's start, middle and end. A live
slot: a refresh replaces the columns in place.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

from dash import html

from dashboard.bar_chart import bar_width_percent
from dashboard.live_slots import SlotKind, slot_id

MAX_COLUMNS = 400  # a window is cut into at most this many buckets, whatever a caller asks


def bucket_starts(since: float, until: float, bucket_seconds: float) -> list[float]:
    """The starts of the buckets from the one holding `since` to the one holding `until` (bucket starts
    are multiples of `bucket_seconds`, as the queries round them); at most MAX_COLUMNS, the newest kept."""
    if bucket_seconds <= 0 or until < since:
        return []
    first = math.floor(since / bucket_seconds) * bucket_seconds
    last = math.floor(until / bucket_seconds) * bucket_seconds
    count = min(MAX_COLUMNS, round((last - first) / bucket_seconds) + 1)
    return [last - (count - 1 - i) * bucket_seconds for i in range(count)]


def column_chart(
    counts: Mapping[float, float],
    starts: list[float],
    bucket_seconds: float,
    chart_id: str,
    *,
    colour: str,
    what: str,
) -> html.Div:
    """A column per bucket of `starts`, as tall as its count's share of the largest (`counts` by bucket
    start; a bucket it lacks counts 0); `what` names the count in each tooltip ("link-down events")."""
    values = [counts.get(start, 0.0) for start in starts]
    largest = max(values, default=0.0)
    columns = [
        html.Span(
            html.Span(
                className="column",
                style={"height": f"{bar_width_percent(value, largest)}%", "background": colour},
            ),
            className="column-slot",
            title=f"{_time(start)}-{_time(start + bucket_seconds)} UTC: {value:g} {what}",
        )
        for start, value in zip(starts, values, strict=True)
    ]
    ticks = sorted({0, len(starts) // 2, len(starts) - 1}) if starts else []
    axis = [html.Span(_time(starts[i])) for i in ticks]
    body = [
        html.Div(f"{largest:g} {what} at most in {bucket_seconds / 60:g} min", className="column-top muted"),
        html.Div(columns, className="column-plot"),
        html.Div(axis, className="column-axis muted"),
    ]
    slot = html.Div(body, id=slot_id(SlotKind.TEXT, chart_id))
    return html.Div(slot, id=chart_id, className="column-chart")


def _time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M")
