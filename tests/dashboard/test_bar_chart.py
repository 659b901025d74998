"""Bar charts drawn in HTML (dashboard/bar_chart.py): one row per bar, lengths against the largest magnitude,
the chart's rows a live slot."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboard.bar_chart import Bar, bar_chart, bar_width_percent
from dashboard.live_slots import SlotKind, mark


def _rows(chart: html.Div) -> list[Any]:
    inner = chart.children
    assert isinstance(inner, html.Div)
    assert isinstance(inner.children, list)
    return inner.children


def _texts(row: Any) -> tuple[str, str]:
    label, _track, value = row.children
    return str(label.children), str(value.children)


def _width(row: Any) -> str:
    return str(row.children[1].children.style["width"])


def test_the_largest_bar_fills_its_track_and_the_others_are_its_share() -> None:
    chart = bar_chart([Bar("XID 48", 3, "red"), Bar("XID 79", 12, "orange"), Bar("XID 13", 6, "orange")], "x")
    rows = _rows(chart)
    assert [_texts(r) for r in rows] == [("XID 48", "3"), ("XID 79", "12"), ("XID 13", "6")]
    assert [_width(r) for r in rows] == ["25.0%", "100.0%", "50.0%"]
    assert rows[0].children[1].children.style["background"] == "red"


def test_signed_values_are_measured_by_magnitude_and_shown_with_their_sign() -> None:
    rows = _rows(
        bar_chart([Bar("temp", 0.25, "red"), Bar("age", -0.5, "green")], "d", decimals=3, signed=True)
    )
    assert [_texts(r) for r in rows] == [("temp", "+0.250"), ("age", "-0.500")]
    assert [_width(r) for r in rows] == ["50.0%", "100.0%"]


def test_a_zero_draws_no_bar_and_a_tiny_value_stays_visible() -> None:
    assert bar_width_percent(0.0, 10.0) == 0.0
    assert bar_width_percent(0.001, 10.0) == 1.0
    assert bar_width_percent(5.0, 0.0) == 0.0
    assert _rows(bar_chart([], "empty")) == []


def test_the_rows_are_one_live_slot_a_refresh_replaces_in_place() -> None:
    before = mark(html.Div(bar_chart([Bar("XID 48", 1, "red")], "fleet-xids")), "fleet")
    after = mark(
        html.Div(bar_chart([Bar("XID 48", 2, "red"), Bar("XID 79", 1, "orange")], "fleet-xids")), "fleet"
    )
    assert list(before.slots) == [(SlotKind.TEXT, "fleet-xids")]
    assert before.shape == after.shape  # new counts, new codes: only the slot's value is sent
    assert before.digests() != after.digests()
