"""Records of the failure predictor's live scores."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prediction:
    """Risk that one GPU fails within the model's horizon, as scored at `ts`."""

    ts: float
    host: str
    device_id: str  # GPU UUID (or any device id of the input contract)
    risk: float  # model score in [0, 1]; higher = more likely to fail
    rank: int  # 1 = most at risk in this scoring round
    model_id: str
    horizon_hours: float
    # JSON list of the features that raised this score most: [{"feature", "value", "contribution"}, ...]
    explanations: str = "[]"
    # the model's base rate (the training window's share of instances that failed within the horizon):
    # what `risk` is read against; None for a score from before it was kept
    base_rate: float | None = None
