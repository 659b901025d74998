"""Bar charts of a few labelled values drawn in HTML, for a page that would otherwise load plotly.js for them.

A page's first dcc.Graph makes its tab fetch, compile and run plotly.js (~0.1 s of a first render on this
machine even with its code cached) before a figure is drawn, then lay the figure out: for ten bars with a
label and a number each, that is most of the cost of the fleet page's one chart (BENCHMARKS.md "First
render, session 8"). A row of plain elements per bar draws with the page. The chart is a live slot: a
refresh replaces its rows in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dash import html

from dashboard.live_slots import SlotKind, slot_id


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    colour: str  # a CSS colour: what the bar's value means (fatal, a risk pushed up or down)


def bar_chart(bars: Sequence[Bar], chart_id: str, *, decimals: int = 0, signed: bool = False) -> html.Div:
    """One row per bar, in the order given: its label, a bar as long as its share of the largest magnitude,
    and its value as text (`signed`: with its sign, for values that push either way)."""
    largest = max((abs(b.value) for b in bars), default=0.0)
    rows = [_row(b, largest, decimals, signed) for b in bars]
    return html.Div(html.Div(rows, id=slot_id(SlotKind.TEXT, chart_id)), id=chart_id, className="bar-chart")


def bar_width_percent(value: float, largest: float) -> float:
    """The bar's length as a share of its track: the largest magnitude fills it, a non-zero value stays
    visible (1 %), nothing is drawn for zero or when there is nothing to compare with."""
    if largest <= 0 or value == 0:
        return 0.0
    return max(1.0, round(100.0 * abs(value) / largest, 1))


def _row(bar: Bar, largest: float, decimals: int, signed: bool) -> html.Div:
    width = bar_width_percent(bar.value, largest)
    text = f"{bar.value:+.{decimals}f}" if signed else f"{bar.value:.{decimals}f}"
    return html.Div(
        [
            html.Span(bar.label, className="bar-label", title=bar.label),
            html.Span(
                html.Span(className="bar", style={"width": f"{width}%", "background": bar.colour}),
                className="bar-track",
            ),
            html.Span(text, className="bar-value"),
        ],
        className="bar-row",
    )
