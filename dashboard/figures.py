"""Plotly figures, built from query rows (pure: data in, figure out), in one look across pages.

Figures are plain dicts in Plotly's JSON schema rather than `plotly.graph_objects`: the objects validate
every property on assignment, which cost 0.4 s for one GPU page (11 s with `add_vline`), and the browser
gets the same JSON either way.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import statistics
from collections.abc import Sequence
from typing import Any, Final

from dash import dcc

from dashboard.health import COLOURS, THROTTLE_BITS, Health
from dashboard.queries.events import EventRow
from dashboard.queries.gpus import GpuSeries
from dashboard.queries.jobs import StepGrid

Figure = dict[str, Any]

_MARGIN = {"l": 60, "r": 20, "t": 30, "b": 30}
_EVENT_COLOURS = {
    "xid": "#d64545",
    "gpu_lost": "#7b1fa2",
    "gpu_fallen_off_bus": "#7b1fa2",
    "link_down": "#1f6fd6",
}
GRAPH_CONFIG: dcc.Graph.Config = {"displaylogo": False}
MAX_EVENT_LINES = 40  # vertical markers drawn; the rest are in the events table
_ROW_GAP = 0.03
_STACKED_BOTTOM = 45  # px under a date axis: its two lines of labels (the times, the date under the first)


def iso(ts: float) -> str:
    """Plotly's time axis reads ISO text; UTC, no offset (every time on the pages is UTC)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@functools.cache
def _template() -> dict[str, Any]:
    import plotly.io as pio

    template: dict[str, Any] = pio.templates["plotly_white"].to_plotly_json()
    return template


def _layout(height: int, **extra: Any) -> dict[str, Any]:
    # uirevision keeps the operator's zoom when a live refresh redraws the figure.
    return {
        "template": _template(),
        "height": height,
        "margin": _MARGIN,
        "uirevision": "keep",
        "showlegend": False,
    } | extra


def _stacked(titles: Sequence[str], height: int) -> dict[str, Any]:
    """A layout of len(titles) rows sharing one time axis (the bottom row's labels), a title over each."""
    n = len(titles)
    row = (1.0 - _ROW_GAP * (n - 1)) / n
    # The x axes do not grow the margin (the template's automargin): one x axis with it, shown or not, made
    # plotly lay out and draw the whole figure twice, half its drawing time (BENCHMARKS.md "First render,
    # session 7"). The bottom margin is sized for the one labelled axis: the times and, under the first,
    # the date.
    layout = _layout(height, margin=_MARGIN | {"b": _STACKED_BOTTOM})
    annotations = []
    for i, title in enumerate(titles):
        top = 1.0 - i * (row + _ROW_GAP)
        suffix = "" if i == 0 else str(i + 1)
        layout[f"yaxis{suffix}"] = {"domain": [top - row, top], "anchor": f"x{suffix}", "automargin": True}
        layout[f"xaxis{suffix}"] = {
            "type": "date",
            "anchor": f"y{suffix}",
            "matches": None if i == 0 else "x",
            "showticklabels": i == n - 1,
            "automargin": False,
        }
        annotations.append(
            {
                "text": title,
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": top,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 12},
            }
        )
    layout["annotations"] = annotations
    return layout


def _axes(row: int) -> dict[str, str]:
    suffix = "" if row == 1 else str(row)
    return {"xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}


# Each row of the GPU's figure; the figure is as tall as its rows.
GPU_ROW_PIXELS: Final = 120


def gpu_over_time(
    series: GpuSeries,
    events: Sequence[EventRow],
    risk_points: Sequence[tuple[float, float]] = (),
    risk_threshold: float = 0.5,
) -> Figure:
    """Everything about one GPU over time in one figure: utilisation, memory, temperature, power, SM clock,
    throttle reasons, ECC errors, remapped rows and the failure risk, one row each on one shared time axis,
    with the GPU's events as vertical markers across every row (hover the triangles for their messages).

    One figure rather than one per subject: zooming any row zooms them all (an ECC ramp lines up with the
    temperature it followed), and a new tab lays out and draws one plot instead of three (plotly's drawing
    was most of the GPU page's first render, BENCHMARKS.md "session 6")."""
    red = {"color": COLOURS[Health.FAILED]}
    rows: list[tuple[str, list[dict[str, Any]]]] = [
        (name, [{"y": values, "name": name, "line": {"width": 1.5}}])
        for name, values in (
            ("utilisation %", series.utilization_gpu_percent),
            ("memory GiB", series.memory_used_gib),
            ("temperature °C", series.temperature_celsius),
            ("power W", series.power_watts),
            ("SM clock MHz", series.sm_clock_mhz),
        )
    ]
    x = [iso(t) for t in series.ts]
    data: list[dict[str, Any]] = [
        {"type": "scatter", "x": x, "mode": "lines"} | trace | _axes(i)
        for i, (_, traces) in enumerate(rows, start=1)
        for trace in traces
    ]
    throttle_row = len(rows) + 1
    data += _throttle_strip(x, series.throttle_reasons, throttle_row)
    memory = [
        (
            f"ECC errors ({series.ecc_scope}): corrected, uncorrected in red",
            series.ecc_corrected_aggregate,
            series.ecc_uncorrected_aggregate,
        ),
        (
            "remapped rows: corrected, uncorrected in red",
            series.remapped_rows_corrected,
            series.remapped_rows_uncorrected,
        ),
    ]
    for i, (_title, corrected, uncorrected) in enumerate(memory, start=throttle_row + 1):
        data += [
            {"type": "scatter", "x": x, "y": corrected, "name": "corrected", "mode": "lines"} | _axes(i),
            {"type": "scatter", "x": x, "y": uncorrected, "name": "uncorrected", "mode": "lines", "line": red}
            | _axes(i),
        ]
    titles = [*(r[0] for r in rows), "throttle reasons", *(m[0] for m in memory)]
    shapes = [_event_line(e) for e in list(events)[:MAX_EVENT_LINES]]
    if risk_points:
        risk_row = len(titles) + 1
        titles.append("failure risk")
        data.append(
            {
                "type": "scatter",
                "x": [iso(t) for t, _ in risk_points],
                "y": [r for _, r in risk_points],
                "mode": "lines+markers",
                "name": "risk",
            }
            | _axes(risk_row)
        )
    layout = _stacked(titles, 60 + GPU_ROW_PIXELS * len(titles))
    layout[f"yaxis{throttle_row}"] |= {"type": "category"}
    if risk_points:
        layout[f"yaxis{risk_row}"] |= {"range": [0, 1]}
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "yref": f"y{risk_row}",
                "x0": 0,
                "x1": 1,
                "y0": risk_threshold,
                "y1": risk_threshold,
                "line": {"color": COLOURS[Health.DEGRADED], "dash": "dash"},
            }
        )
    layout["shapes"] = shapes
    shown = list(events)[:MAX_EVENT_LINES]
    if shown:
        data.append(
            {
                "type": "scatter",
                "x": [iso(e.ts) for e in shown],
                "y": [100.0] * len(shown),
                "mode": "markers",
                "marker": {
                    "symbol": "triangle-down",
                    "size": 10,
                    "color": [_EVENT_COLOURS.get(e.kind, "#555") for e in shown],
                },
                "hovertext": [_event_label(e) for e in shown],
                "hoverinfo": "text",
                "name": "events",
            }
            | _axes(1)
        )
    return {"data": data, "layout": layout}


def _throttle_strip(x: list[str], reasons: list[int], row: int) -> list[dict[str, Any]]:
    """One category per throttle reason, a square where it was on; "none" along the axis when none ever was
    (an empty category trace would draw NaN paths)."""
    traces: list[dict[str, Any]] = []
    for bit, label in THROTTLE_BITS.items():
        points = [xi for xi, r in zip(x, reasons, strict=True) if r & bit]
        if points:
            marker = {"symbol": "square", "size": 6, "color": COLOURS[Health.DEGRADED]}
            traces.append(
                {"type": "scatter", "x": points, "y": [label] * len(points), "mode": "markers", "name": label}
                | {"marker": marker}
                | _axes(row)
            )
    if not traces and x:
        line = {"color": COLOURS[Health.HEALTHY]}
        traces.append(
            {"type": "scatter", "x": x, "y": ["none"] * len(x), "mode": "lines", "name": "none", "line": line}
            | _axes(row)
        )
    return traces


def _event_line(e: EventRow) -> dict[str, Any]:
    """A dotted line across every row (yref paper) at the event's time."""
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": iso(e.ts),
        "x1": iso(e.ts),
        "y0": 0,
        "y1": 1,
        "line": {"color": _EVENT_COLOURS.get(e.kind, "#555"), "width": 1, "dash": "dot"},
    }


def _event_label(e: EventRow) -> str:
    code = f" {e.code}" if e.code is not None else ""
    times = f" x{e.count}" if e.count > 1 else ""
    return f"{e.kind}{code}{times}: {e.message[:160]}"


# Margins wide enough for what a figure's axes show, so that plotly's automargin (kept, from the template, for
# what these estimates miss) finds nothing to grow: a margin it grows makes it lay out and draw the figure a
# second time (BENCHMARKS.md "First render, session 7").
_CHAR_PIXELS: Final = 7.5  # a tick label's character, 12 px font, with room to spare
_COLOURBAR_PIXELS: Final = 120
# At most this much of a figure's width for its labels: a host or link name is the agent's to choose, and a
# long one must not squeeze the plot away (plotly clips the label instead).
_MAX_LABEL_MARGIN: Final = 320


def _label_margin(labels: Sequence[str], least: int = _MARGIN["l"]) -> int:
    """The left margin that holds the longest of `labels` as tick labels."""
    longest = max((len(label) for label in labels), default=0)
    return min(_MAX_LABEL_MARGIN, max(least, math.ceil(_CHAR_PIXELS * longest) + 16))


def bar(
    labels: Sequence[str],
    values: Sequence[float],
    colours: Sequence[str] | str,
    *,
    height: int = 260,
    horizontal: bool = False,
) -> Figure:
    marker = {"color": list(colours) if not isinstance(colours, str) else colours}
    if horizontal:
        trace = {"type": "bar", "y": list(labels), "x": list(values), "orientation": "h", "marker": marker}
        margin = _MARGIN | {"l": _label_margin(labels)}
        return {
            "data": [trace],
            "layout": _layout(height, yaxis={"autorange": "reversed", "automargin": True}, margin=margin),
        }
    trace = {"type": "bar", "x": list(labels), "y": list(values), "marker": marker}
    return {"data": [trace], "layout": _layout(height)}


# A rank's step time against the job's median: blue faster, white at the median, red slower.
STEP_COLOURS: Final = [[0.0, "#2166ac"], [0.5, "#f7f7f7"], [1.0, "#b2182b"]]
# Step times are sent as hover shows them (`%{z:.4f}`): at 256 ranks x 120 buckets, full floats made the job
# page's body 630 kB of JSON for the browser to parse; a colour never turns on the fifth decimal of a second.
STEP_DECIMALS: Final = 4
# The colour scale spans at least this share of the median each way: ranks a few tenths of a percent apart
# (noise) all look like the median instead of filling the scale from one end to the other.
MIN_SPAN_FRACTION: Final = 0.10


def centred_range(
    values: Sequence[float | None], min_fraction: float = MIN_SPAN_FRACTION
) -> tuple[float, float]:
    """(zmin, zmax) symmetric around the median of `values`: as wide as the farthest value from it, at least
    `min_fraction` of the median each way, at most the median each way (a step time is never below zero;
    a rank more than twice as slow is simply the reddest). (0, 1) when there is nothing to scale."""
    present = sorted(v for v in values if v is not None and math.isfinite(v))
    if not present:
        return 0.0, 1.0
    median = statistics.median(present)
    if median <= 0:
        return 0.0, max(present[-1], 1e-9)
    farthest = max(median - present[0], present[-1] - median)
    half = min(max(farthest, median * min_fraction), median)
    return median - half, median + half


def step_heatmap(grid: StepGrid) -> Figure:
    """Rank x time, the median step time per bucket, coloured against the job's median step time: a
    straggler is a red row, a slowdown a red column, identical ranks all white."""
    zmin, zmax = centred_range([v for row in grid.seconds for v in row])
    rank_labels = [f"rank {r}" for r in grid.ranks]
    trace = {
        "type": "heatmap",
        "z": [[None if v is None else round(v, STEP_DECIMALS) for v in row] for row in grid.seconds],
        "x": [iso(t) for t in grid.bucket_ts],
        "y": rank_labels,
        "colorscale": STEP_COLOURS,
        "zauto": False,
        "zmin": zmin,
        "zmax": zmax,
        "colorbar": {"title": {"text": "s / step"}},
        "hovertemplate": f"%{{y}} %{{x}}<br>%{{z:.{STEP_DECIMALS}f}} s<extra></extra>",
    }
    layout = _layout(
        max(240, 40 + 18 * len(grid.ranks)),
        yaxis={"autorange": "reversed", "type": "category", **rank_ticks(len(grid.ranks))},
        xaxis={"type": "date"},
        # The colour bar on the right, a date axis's two lines under the plot (see _label_margin).
        margin=_MARGIN | {"l": _label_margin(rank_labels), "r": _COLOURBAR_PIXELS, "b": _STACKED_BOTTOM},
    )
    return {"data": [trace], "layout": layout}


# Plotly measures every tick label it draws (its bounding box, for the margins): at 256 ranks that was a
# quarter of a second of the job page's first render in Chromium. Past this many rows only every k-th rank
# is labelled; hovering a row still names its rank.
MAX_LABELLED_RANKS: Final = 64


def rank_ticks(ranks: int, most: int = MAX_LABELLED_RANKS) -> dict[str, Any]:
    """The rank axis' tick settings: every rank labelled up to `most` rows, else every k-th rank so that at
    most `most` labels are drawn."""
    if ranks <= most:
        return {}
    return {"tickmode": "linear", "tick0": 0, "dtick": math.ceil(ranks / most)}
