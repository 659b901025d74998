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
    return "\n".join(lines)
