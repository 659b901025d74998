"""Plotly figures, built from query rows (pure: data in, figure out), in one look across pages."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import plotly.graph_objects as go
from dash import dcc
from plotly.subplots import make_subplots

from dashboard.health import COLOURS, THROTTLE_BITS, Health
from dashboard.queries.events import EventRow
from dashboard.queries.gpus import GpuSeries
from dashboard.queries.jobs import StepGrid

_TEMPLATE = "plotly_white"
_MARGIN = {"l": 60, "r": 20, "t": 30, "b": 30}
_EVENT_COLOURS = {
    "xid": "#d64545",
    "gpu_lost": "#7b1fa2",
    "gpu_fallen_off_bus": "#7b1fa2",
    "link_down": "#1f6fd6",
}
GRAPH_CONFIG: dcc.Graph.Config = {"displaylogo": False}
MAX_EVENT_LINES = 40  # vertical markers drawn; the rest are in the events table


def iso(ts: float) -> str:
    """Plotly's time axis reads ISO text; UTC, no offset (every time on the pages is UTC)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _finish(fig: go.Figure, height: int) -> go.Figure:
    # uirevision keeps the operator's zoom when a live refresh redraws the figure.
    fig.update_layout(template=_TEMPLATE, height=height, margin=_MARGIN, uirevision="keep", showlegend=False)
    return fig


def gpu_timeseries(series: GpuSeries, events: Sequence[EventRow]) -> go.Figure:
    """Utilisation, memory, temperature, power, SM clock and throttle reasons on one time axis, with the
    GPU's events as vertical markers (hover one for its message)."""
    rows = (
        ("utilisation %", series.utilization_gpu_percent),
        ("memory GiB", series.memory_used_gib),
        ("temperature °C", series.temperature_celsius),
        ("power W", series.power_watts),
        ("SM clock MHz", series.sm_clock_mhz),
    )
    fig = make_subplots(
        rows=len(rows) + 1,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.025,
        subplot_titles=[*(r[0] for r in rows), "throttle reasons"],
    )
    x = [iso(t) for t in series.ts]
    for i, (name, values) in enumerate(rows, start=1):
        fig.add_trace(go.Scatter(x=x, y=values, name=name, mode="lines", line={"width": 1.5}), row=i, col=1)
    _throttle_strip(fig, x, series.throttle_reasons, len(rows) + 1)
    _mark_events(fig, events)
    fig.update_xaxes(type="date")
    for annotation in fig.layout.annotations:
        annotation.update(font={"size": 12}, x=0, xanchor="left")
    return _finish(fig, 820)


def _throttle_strip(fig: go.Figure, x: list[str], reasons: list[int], row: int) -> None:
    """One row per throttle reason, a square where it was on; "none" along the axis when none ever was
    (an empty category trace would draw NaN paths)."""
    drawn = False
    for bit, label in THROTTLE_BITS.items():
        points = [xi for xi, r in zip(x, reasons, strict=True) if r & bit]
        if points:
            marker = {"symbol": "square", "size": 6, "color": COLOURS[Health.DEGRADED]}
            fig.add_trace(
                go.Scatter(x=points, y=[label] * len(points), mode="markers", name=label, marker=marker),
                row=row,
                col=1,
            )
            drawn = True
    if not drawn and x:
        fig.add_trace(
            go.Scatter(
                x=x, y=["none"] * len(x), mode="lines", name="none", line={"color": COLOURS[Health.HEALTHY]}
            ),
            row=row,
            col=1,
        )
    fig.update_yaxes(type="category", row=row, col=1)


def _mark_events(fig: go.Figure, events: Sequence[EventRow]) -> None:
    for e in list(events)[:MAX_EVENT_LINES]:
        colour = _EVENT_COLOURS.get(e.kind, "#555")
        fig.add_vline(x=iso(e.ts), line={"color": colour, "width": 1, "dash": "dot"})
    if events:
        shown = list(events)[:MAX_EVENT_LINES]
        fig.add_trace(
            go.Scatter(
                x=[iso(e.ts) for e in shown],
                y=[100.0] * len(shown),
                mode="markers",
                marker={
                    "symbol": "triangle-down",
                    "size": 10,
                    "color": [_EVENT_COLOURS.get(e.kind, "#555") for e in shown],
                },
                hovertext=[_event_label(e) for e in shown],
                hoverinfo="text",
                name="events",
            ),
            row=1,
            col=1,
        )


def _event_label(e: EventRow) -> str:
    code = f" {e.code}" if e.code is not None else ""
    times = f" x{e.count}" if e.count > 1 else ""
    return f"{e.kind}{code}{times}: {e.message[:160]}"


def memory_errors(series: GpuSeries) -> go.Figure:
    """ECC (aggregate) and row remapping counters over the window: a ramp here precedes many failures."""
    x = [iso(t) for t in series.ts]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=["ECC errors (aggregate)", "remapped rows"],
    )
    fig.add_trace(
        go.Scatter(x=x, y=series.ecc_corrected_aggregate, name="corrected", mode="lines"), row=1, col=1
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=series.ecc_uncorrected_aggregate,
            name="uncorrected",
            mode="lines",
            line={"color": COLOURS[Health.FAILED]},
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(x=x, y=series.remapped_rows_corrected, name="corrected rows", mode="lines"), row=2, col=1
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=series.remapped_rows_uncorrected,
            name="uncorrected rows",
            mode="lines",
            line={"color": COLOURS[Health.FAILED]},
        ),
        row=2,
        col=1,
    )
    fig.update_xaxes(type="date")
    fig = _finish(fig, 360)
    fig.update_layout(showlegend=True, legend={"orientation": "h", "y": -0.15})
    return fig


def risk_history(points: Sequence[tuple[float, float]], threshold: float) -> go.Figure:
    fig = go.Figure(
        go.Scatter(x=[iso(t) for t, _ in points], y=[r for _, r in points], mode="lines+markers", name="risk")
    )
    fig.add_hline(
        y=threshold, line={"color": COLOURS[Health.DEGRADED], "dash": "dash"}, annotation_text="threshold"
    )
    fig.update_yaxes(range=[0, 1], title="failure risk")
    return _finish(fig, 260)


def bar(
    labels: Sequence[str],
    values: Sequence[float],
    colours: Sequence[str] | str,
    *,
    height: int = 260,
    horizontal: bool = False,
) -> go.Figure:
    if horizontal:
        trace = go.Bar(y=list(labels), x=list(values), orientation="h", marker={"color": colours})
    else:
        trace = go.Bar(x=list(labels), y=list(values), marker={"color": colours})
    fig = go.Figure(trace)
    if horizontal:
        fig.update_yaxes(autorange="reversed")
    return _finish(fig, height)


def time_bars(
    ts: Sequence[float], values: Sequence[float], colour: str, title: str, *, height: int = 260
) -> go.Figure:
    fig = go.Figure(go.Bar(x=[iso(t) for t in ts], y=list(values), marker={"color": colour}))
    fig.update_yaxes(title=title)
    return _finish(fig, height)


def step_heatmap(grid: StepGrid) -> go.Figure:
    """Rank x time, the median step time per bucket: a straggler is a hot row, a slowdown a hot column."""
    fig = go.Figure(
        go.Heatmap(
            z=grid.seconds,
            x=[iso(t) for t in grid.bucket_ts],
            y=[f"rank {r}" for r in grid.ranks],
            colorscale="YlOrRd",
            colorbar={"title": {"text": "s / step"}},
            hovertemplate="%{y} %{x}<br>%{z:.3f} s<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", type="category")
    return _finish(fig, max(240, 40 + 18 * len(grid.ranks)))
