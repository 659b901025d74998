"""The one scoring service `fleetguard up` and `fleetguard controller` both run: a saved model scores every
GPU in a store on its last complete step, the model's selection rule picks the at-risk ones, and each round
returns the predictions (calibrated risk, explanations) and the at-risk findings to store.

What happens next differs only by what each process can see: `up` runs on the GPU host, so it also names
the job on an at-risk GPU, asks it to checkpoint and marks the GPU to drain when its work ends; the
controller stores predictions and findings, and its incident pipeline opens the warnings.

With `[predictor] average_retrains` = R > 1 each step is ranked by the serving model and the R - 1 registry
models that served before it and still have their files (live.py says how): what the backtest's
`xgboost_avg` measured, served.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import duckdb

from fleetguard.predict.live import LiveScorer, ScoredRound, at_risk_findings
from fleetguard.predict.model_files import earlier_models, serving_model
from fleetguard.records.findings import Finding
from fleetguard.records.prediction import Prediction
from predictor import artifact

log = logging.getLogger(__name__)

MAX_FLAGGED_REMEMBERED = 100_000  # GPUs counted in the status line; a bound, not a fleet size


@dataclass(frozen=True)
class ScoringRound:
    predictions: list[Prediction]
    picked: list[Prediction]
    findings: list[Finding]


class ScoringService:
    """Not thread-safe: one loop (up's scoring thread, the controller's maintenance thread) owns it."""

    def __init__(self, model_dir: Path, budget_k: int = 0, average_retrains: int = 1) -> None:
        self.model_dir = model_dir
        self.budget_k = budget_k
        self.average_retrains = average_retrains
        self.scorer = LiveScorer(model_dir, budget_k=budget_k)
        self._serving: Path = model_dir
        self._earlier: tuple[Path, ...] = ()
        self._refused: Path | None = None
        self._flagged: set[str] = set()
        self._last: ScoredRound | None = None

    def follow_registry(self, con: duckdb.DuckDBPyConnection) -> None:
        """Serve the registry's active model (or model_dir's own): a promotion or rollback takes effect at
        the next round, without a restart. A model that cannot load is logged once; the one serving stays.
        With rank averaging, the models that served before it follow the registry the same way."""
        try:
            wanted, wanted_id = serving_model(con, self.model_dir)
            earlier = earlier_models(con, self.model_dir, wanted_id, self.average_retrains - 1)
        except (duckdb.Error, ValueError) as exc:  # a store without the registry (older), a bad id
            log.debug("model registry not read: %s", exc)
            return
        if wanted == self._refused or (wanted == self._serving and earlier == self._earlier):
            return
        previous = _load_earlier(earlier)
        if wanted == self._serving:  # the same model serves: its period's picks carry on
            self.scorer.average_with(previous)
            self._earlier = earlier
            return
        try:
            scorer = LiveScorer(wanted, budget_k=self.budget_k, previous=previous)
        except (ValueError, OSError) as exc:  # ArtifactError is a ValueError
            self._refused = wanted
            serving = self.scorer.loaded.model_id
            log.warning("model %s cannot serve (%s); %s keeps serving", wanted.name, exc, serving)
            return
        log.warning("scoring now with model %s (was %s)", scorer.loaded.model_id, self.scorer.loaded.model_id)
        self.scorer, self._serving, self._earlier, self._refused = scorer, wanted, earlier, None

    @property
    def horizon_seconds(self) -> float:
        return self.scorer.loaded.spec.horizon_seconds

    def round(self, con: duckdb.DuckDBPyConnection, now: float) -> ScoringRound:
        """Score the store's GPUs as of `now`; at-risk findings are stamped `now`, when they were raised
        (their id stays the step's, so a step scored twice raises nothing twice)."""
        self.follow_registry(con)
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


def _load_earlier(directories: tuple[Path, ...]) -> list[artifact.LoadedModel]:
    """The earlier models that load; one that does not (files gone, damaged) is left out, one log line."""
    out = []
    for d in directories:
        try:
            out.append(artifact.load(d))
        except (ValueError, OSError) as exc:  # ArtifactError is a ValueError
            log.warning("model %s is left out of the rank average: %s", d.name, exc)
    return out
