"""The promotion gate of a retrain: a candidate against the serving model on the most recent out-of-time
period, at equal volume, with the backtest's own selection (K per period, spent step by step) and metric
(precision of the picks). The candidate is promoted only if it is not worse."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from predictor.selection import select_at_volume, select_causal_k, volume_by_step

FloatArray = npt.NDArray[np.float64]
ObjArray = npt.NDArray[np.object_]


class Verdict(StrEnum):
    PROMOTE = "promote"
    REJECT = "reject"


@dataclass(frozen=True)
class Picks:
    predictions: int
    hits: int

    @property
    def precision(self) -> float | None:
        return self.hits / self.predictions if self.predictions else None


@dataclass(frozen=True)
class GateFigures:
    """What the gate saw: the evaluation period, its instances and failures, K, and both models' picks."""

    start_ts: float
    end_ts: float
    k: int
    period_seconds: float
    instances: int
    positives: int
    candidate: Picks
    current: Picks | None  # None: no model was serving

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["candidate"]["precision"] = self.candidate.precision
        if self.current is not None:
            out["current"]["precision"] = self.current.precision
        return out


def compare(
    device_id: ObjArray,
    ts: FloatArray,
    label: FloatArray,
    candidate_score: FloatArray,
    current_score: FloatArray | None,
    k: int,
    period_seconds: float,
    step_seconds: float,
) -> GateFigures:
    """The candidate picks K per period; the current model picks as many at every step (equal volume).
    Instances are those of the evaluation period whose labels are known (0 or 1)."""
    if len(ts) == 0:
        raise ValueError("no instances with known labels in the evaluation period")
    start = math.floor(float(ts.min()) / period_seconds) * period_seconds
    period = np.floor((ts - start) / period_seconds).astype(np.int64)
    starts = start + period_seconds * np.arange(int(period.max()) + 1, dtype=np.float64)
    chosen = select_causal_k(period, ts, device_id, candidate_score, k, starts, period_seconds, step_seconds)
    candidate = Picks(len(chosen), int((label[chosen] == 1.0).sum()))
    current = None
    if current_score is not None:
        volume = volume_by_step(period, ts, chosen)
        same = select_at_volume(period, ts, device_id, current_score, volume)
        current = Picks(len(same), int((label[same] == 1.0).sum()))
    return GateFigures(
        start_ts=float(ts.min()),
        end_ts=float(ts.max()),
        k=k,
        period_seconds=period_seconds,
        instances=len(ts),
        positives=int((label == 1.0).sum()),
        candidate=candidate,
        current=current,
    )


def decide(figures: GateFigures) -> tuple[Verdict, str]:
    """Promote when no model serves, or when the candidate's precision at equal volume is not below the
    current one's. Without failures in the period nothing shows the candidate is not worse: kept out."""
    if figures.current is None:
        return Verdict.PROMOTE, "no model was serving"
    if figures.positives == 0:
        return Verdict.REJECT, "no failures in the evaluation period: nothing to compare the models on"
    cand, cur = figures.candidate.precision, figures.current.precision
    if cand is None:
        return Verdict.REJECT, "the candidate picked nothing in the evaluation period"
    if cur is None or cand >= cur:
        return Verdict.PROMOTE, f"precision {cand:.3f} against {_fmt(cur)} at equal volume"
    return Verdict.REJECT, f"precision {cand:.3f} below the serving model's {_fmt(cur)} at equal volume"


def _fmt(p: float | None) -> str:
    return "none" if p is None else f"{p:.3f}"
