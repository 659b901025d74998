"""Self-contained HTML backtest report: summary table, PR curves and precision/recall per period, as inline
SVG (no script, no external resource)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from predictor.backtest import BacktestResult
from predictor.metrics import ModelMetrics
from predictor.selection import ranks_within_steps

_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
_W, _H, _PAD = 460, 300, 40


def _fmt(v: float | int | None, digits: int = 3) -> str:
    if v is None:
        return "–"
    return str(v) if isinstance(v, int) else f"{v:.{digits}f}"


def pr_curve(
    label: npt.NDArray[np.float64], score: npt.NDArray[np.float64], points: int = 200
) -> list[tuple[float, float]]:
    """(recall, precision) points of the precision-recall curve over labelled instances, thinned."""
    known = ~np.isnan(label) & ~np.isnan(score)
    y, s = label[known], score[known]
    if y.sum() == 0:
        return []
    order = np.argsort(-s, kind="stable")
    tp = np.cumsum(y[order])
    precision = tp / np.arange(1, len(y) + 1)
    recall = tp / y.sum()
    pick = np.unique(np.linspace(0, len(y) - 1, min(points, len(y))).astype(int))
    return [(float(recall[i]), float(precision[i])) for i in pick]


def _polyline(points: Sequence[tuple[float, float]], colour: str, x_max: float, y_max: float = 1.0) -> str:
    if not points:
        return ""
    coords = " ".join(
        f"{_PAD + (x / (x_max or 1)) * (_W - 2 * _PAD):.1f},{_H - _PAD - (y / y_max) * (_H - 2 * _PAD):.1f}"
        for x, y in points
    )
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{coords}"/>'


def _axes(x_label: str, y_label: str, x_ticks: Sequence[tuple[float, str]]) -> str:
    parts = [
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#333"/>',
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#333"/>',
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" font-size="11">{html.escape(x_label)}</text>',
        f'<text x="12" y="{_H / 2}" font-size="11" transform="rotate(-90 12 {_H / 2})" text-anchor="middle">'
        f"{html.escape(y_label)}</text>",
    ]
    for frac in (0.0, 0.5, 1.0):
        y = _H - _PAD - frac * (_H - 2 * _PAD)
        parts.append(f'<text x="{_PAD - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{frac:g}</text>')
    for frac, text in x_ticks:
        x = _PAD + frac * (_W - 2 * _PAD)
        parts.append(
            f'<text x="{x:.1f}" y="{_H - _PAD + 14}" font-size="10" text-anchor="middle">'
            f"{html.escape(text)}</text>"
        )
    return "".join(parts)


def _legend(names: Sequence[str]) -> str:
    return "".join(
        f'<rect x="{_W - 130}" y="{12 + 14 * i}" width="10" height="10" '
        f'fill="{_COLOURS[i % len(_COLOURS)]}"/>'
        f'<text x="{_W - 115}" y="{21 + 14 * i}" font-size="10">{html.escape(n)}</text>'
        for i, n in enumerate(names)
    )


def _svg(body: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}">'
        f"{body}</svg>"
    )


def _span(v: list[float | None] | None) -> str:
    if not v or v[0] is None or v[1] is None:
        return "–"
    return f"{v[0]:.3f}–{v[1]:.3f}"


def _dot(x: float, y: float, colour: str) -> str:
    cx = _PAD + x * (_W - 2 * _PAD)
    cy = _H - _PAD - y * (_H - 2 * _PAD)
    return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" fill="{colour}"/>'


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def render(
    result: BacktestResult,
    k: int,
    metrics: dict[str, ModelMetrics],
    title: str = "Failure prediction backtest",
) -> str:
    scored = result.scored
    names = list(metrics)
    rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td>{_fmt(m.precision_at_k)}</td><td>{m.predictions}</td><td>{m.hits}</td>"
        f"<td>{_fmt(m.recall)}</td><td>{_fmt(m.pr_auc)}</td><td>{_fmt(m.median_lead_time_hours, 1)}</td>"
        f"<td>{_fmt(m.precision_std)}</td><td>{_fmt(m.baseline_precision_same_volume)}</td></tr>"
        for n, m in metrics.items()
    )
    score_names = [n for n in names if n in result.scores or n in ("parallel", "parallel_rank")]
    pr_lines = []
    for i, n in enumerate(score_names):
        s = result.scores.get(n)
        if s is None:
            # the rank average as the backtest picks by it: ranks among each step's instances
            members = [m for m in result.config.parallel_members if m in result.scores]
            s = np.mean([ranks_within_steps(result.scores[m], scored.ts) for m in members], axis=0)
        pr_lines.append(_polyline(pr_curve(scored.label, s), _COLOURS[i % len(_COLOURS)], 1.0))
    pr_svg = _svg(
        _axes("recall", "precision", [(0, "0"), (0.5, "0.5"), (1, "1")])
        + "".join(pr_lines)
        + _legend(score_names)
    )
    n_periods = max(1, len(scored.period_starts) - 1)
    ticks = (
        [(0.0, _day(scored.period_starts[0])), (1.0, _day(scored.period_starts[-1]))]
        if len(scored.period_starts)
        else []
    )
    prec_lines, rec_lines = [], []
    for i, n in enumerate(names):
        colour = _COLOURS[i % len(_COLOURS)]
        per = metrics[n].periods
        prec_lines.append(
            _polyline(
                [(p, pm.precision) for p, pm in enumerate(per) if pm.precision is not None], colour, n_periods
            )
        )
        rec_lines.append(
            _polyline(
                [(p, pm.caught / pm.failures) for p, pm in enumerate(per) if pm.failures], colour, n_periods
            )
        )
    prec_svg = _svg(_axes("scoring period", f"precision@{k}", ticks) + "".join(prec_lines) + _legend(names))
    rec_svg = _svg(_axes("scoring period", "recall", ticks) + "".join(rec_lines) + _legend(names))
    cfg = result.config
    retrains = "".join(
        f"<tr><td>{_day(r.at_ts)}</td><td>{r.train_window_seconds / 86400:g} d</td><td>{r.rows}</td>"
        f"<td>{r.positives}</td><td>{_day(r.max_train_ts)}</td></tr>"
        for r in result.retrains
    )
    first_day = _day(scored.period_starts[0]) if len(scored.period_starts) else "–"
    intervals = "".join(
        f"<tr><td>{html.escape(n)}</td>"
        + "".join(
            f"<td>{_span(m.intervals.get(r, {}).get(key))}</td>"
            for key in ("precision_at_k", "recall", "ratio_to_static")
            for r in ("devices", "days")
        )
        + f"<td>{_fmt(m.brier)}</td><td>{_fmt(m.mean_risk_of_predictions)}</td>"
        f"<td>{html.escape(m.noise_verdict)}</td></tr>"
        for n, m in metrics.items()
    )
    calibrated = [n for n in names if metrics[n].reliability]
    rel_lines = [
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_PAD}" '
        'stroke="#bbb" stroke-dasharray="4"/>'
    ]
    for i, n in enumerate(calibrated):
        points = [(p[0], p[1]) for p in metrics[n].reliability]
        colour = _COLOURS[i % len(_COLOURS)]
        rel_lines.append(_polyline(points, colour, 1.0))
        rel_lines.extend(_dot(x, y, colour) for x, y in points)
    rel_svg = _svg(
        _axes("predicted risk (calibrated)", "observed failure share", [(0, "0"), (0.5, "0.5"), (1, "1")])
        + "".join(rel_lines)
        + _legend(calibrated)
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:first-child{{text-align:left}}
.charts{{display:flex;flex-wrap:wrap;gap:1em}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>K = {k} per period of {cfg.period / 86400:g} d (chosen at each step from its scores);
horizon {cfg.horizon_seconds / 86400:g} d;
{len(scored.period_starts)} periods from {first_day};
retrain every {cfg.retrain_every_seconds / 86400:g} d on the last {cfg.train_window_seconds / 86400:g} d.
<code>xgboost_static</code> is trained once on the first window. Baseline = xgboost_static's precision at the
same number of predictions per period.</p>
<table><tr><th>model</th><th>precision@K</th><th>predictions</th><th>hits</th><th>recall</th><th>PR-AUC</th>
<th>median lead (h)</th><th>precision std</th><th>baseline same volume</th></tr>{rows}</table>
<div class="charts">
<figure>{pr_svg}<figcaption>Precision-recall over all scored instances</figcaption></figure>
<figure>{prec_svg}<figcaption>Precision@{k} per period</figcaption></figure>
<figure>{rec_svg}<figcaption>Recall per period (failures in the period caught beforehand)</figcaption>
</figure></div>
<h2>Uncertainty and calibration</h2>
<p>95% bootstrap intervals, resampling devices and, separately, days. Ratio = precision / xgboost_static's
precision at the same volume. Brier score of the calibrated risk (isotonic or Platt, fitted per retrain on
out-of-fold scores of its training window) over all scored instances.</p>
<table><tr><th>model</th><th>precision (devices)</th><th>precision (days)</th><th>recall (devices)</th>
<th>recall (days)</th><th>ratio (devices)</th><th>ratio (days)</th><th>Brier</th>
<th>mean risk of predictions</th><th>verdict</th></tr>{intervals}</table>
<figure>{rel_svg}<figcaption>Reliability: mean calibrated risk per bin against the share that failed
(the diagonal is perfect calibration)</figcaption></figure>
<h2>Retrains</h2>
<table><tr><th>at</th><th>L_train</th><th>rows</th><th>positives</th><th>last training instance</th>
</tr>
{retrains}</table></body></html>
"""
