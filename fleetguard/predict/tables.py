"""Backtest metrics as a markdown table (the CLI's default output and BENCHMARKS.md's rows)."""

from __future__ import annotations

from predictor.metrics import ModelMetrics


def _f(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def markdown_table(metrics: dict[str, ModelMetrics]) -> str:
    lines = [
        "| model | precision@K | predictions | hits | recall | PR-AUC | median lead h | precision std "
        "| baseline same volume |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in metrics.items():
        lines.append(
            f"| {name} | {_f(m.precision_at_k)} | {m.predictions} | {m.hits} | {_f(m.recall)} "
            f"| {_f(m.pr_auc)} | {_f(m.median_lead_time_hours, 1)} | {_f(m.precision_std)} "
            f"| {_f(m.baseline_precision_same_volume)} |"
        )
    lines += ["", "95% bootstrap intervals, resampling devices | days:"]
    for name, m in metrics.items():
        lines.append(f"- {name}: {_intervals(m)}; {m.noise_verdict}")
    return "\n".join(lines)


def _pair(v: list[float | None] | None) -> str:
    if not v or v[0] is None or v[1] is None:
        return "–"
    return f"[{v[0]:.3f}, {v[1]:.3f}]"


def _intervals(m: ModelMetrics) -> str:
    dev, day = m.intervals.get("devices", {}), m.intervals.get("days", {})
    return "; ".join(
        f"{label} {_pair(dev.get(key))} | {_pair(day.get(key))}"
        for label, key in (
            ("precision", "precision_at_k"),
            ("recall", "recall"),
            ("ratio", "ratio_to_static"),
        )
    )
