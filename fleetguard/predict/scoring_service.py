"""The one scoring service `fleetguard up` and `fleetguard controller` both run: a saved model scores every
GPU in a store on its last complete step, the model's selection rule picks the at-risk ones, and each round
returns the predictions (calibrated risk, explanations) and the at-risk findings to store.

What happens next differs only by what each process can see: `up` runs on the GPU host, so it also names
the job on an at-risk GPU, asks it to checkpoint and marks the GPU to drain when its work ends; the
controller stores predictions and findings, and its incident pipeline opens the warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from fleetguard.predict.live import LiveScorer, ScoredRound, at_risk_findings
from fleetguard.records.findings import Finding
from fleetguard.records.prediction import Prediction

MAX_FLAGGED_REMEMBERED = 100_000  # GPUs counted in the status line; a bound, not a fleet size


@dataclass(frozen=True)
class ScoringRound:
    predictions: list[Prediction]
    picked: list[Prediction]
    findings: list[Finding]


class ScoringService:
    """Not thread-safe: one loop (up's scoring thread, the controller's maintenance thread) owns it."""

    def __init__(self, model_dir: Path, budget_k: int = 0) -> None:
        self.scorer = LiveScorer(model_dir, budget_k=budget_k)
        self._flagged: set[str] = set()
        self._last: ScoredRound | None = None

    @property
    def horizon_seconds(self) -> float:
        return self.scorer.loaded.spec.horizon_seconds

    def round(self, con: duckdb.DuckDBPyConnection, now: float) -> ScoringRound:
        """Score the store's GPUs as of `now`; at-risk findings are stamped `now`, when they were raised
        (their id stays the step's, so a step scored twice raises nothing twice)."""
        scored = self.scorer.score(con, now)
        self._last = scored
        if len(self._flagged) < MAX_FLAGGED_REMEMBERED:
            self._flagged.update(p.device_id for p in scored.picked)
        findings = at_risk_findings(scored.picked, self.scorer.policy, raised_at=now)
        return ScoringRound(scored.predictions, scored.picked, findings)

    def describe(self) -> str:
        """The status line's part: GPUs scored, flagged since start, and the riskiest now."""
        if self._last is None or not self._last.predictions:
            return "risk: waiting for data"
        top = max(self._last.predictions, key=lambda p: p.risk)
        return (
            f"scored {len(self._last.predictions)} GPUs, flagged {len(self._flagged)} "
            f"(top {top.host}/{top.device_id[:12]} risk {top.risk:.2f})"
        )
