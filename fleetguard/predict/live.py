"""Live scoring: score every recently seen GPU from the store with a saved model, then pick the at-risk ones.

The features come from the same SQL as training, over the store's recent rows only. `risk` is the model's
calibrated probability of a failure within its horizon, and which GPUs are flagged is the model's own
selection rule (K per period, a device once per period, its risk floor) applied through the same
`predictor.selection.pick_step` the backtest measured it with. Never a hand-picked threshold on a raw score.

The demo's model is built in demo_model.py: production scoring never imports the simulator.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import numpy.typing as npt

from fleetguard.predict.store_reader import STORE_MODEL_HINT, FailureRule, register_store, time_filter
from fleetguard.records.evidence import AtRiskEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.prediction import Prediction
from predictor import artifact
from predictor.dataset import build_instances, fetch_instances
from predictor.explain import drivers_vs_reference
from predictor.models import Matrix
from predictor.risk_policy import RiskPolicy
from predictor.selection import SelectionRule, StepSelector
from predictor.training import latest_per_device

# Explanations cost one scoring pass per feature: only the riskiest GPUs of a round (and every pick) get them.
EXPLAIN_TOP = 32


@dataclass(frozen=True)
class ScoredRound:
    """One scoring round: a prediction per GPU (calibrated risk, rank) and the ones the selection rule picked
    at this step (empty when the step was scored before: a step is picked from once)."""

    predictions: list[Prediction]
    picked: list[Prediction] = field(default_factory=list)


class LiveScorer:
    """Scores the GPUs of a store connection with the model saved in `model_dir` and applies its selection
    rule, step by step, carrying the period's picks between rounds. `budget_k` > 0 replaces the model's K."""

    def __init__(self, model_dir: Path, rule: FailureRule | None = None, budget_k: int = 0) -> None:
        self.loaded = artifact.load(model_dir)
        self.policy: RiskPolicy = artifact.require_policy(self.loaded)
        if budget_k > 0:
            self.policy = RiskPolicy(
                self.policy.calibration,
                SelectionRule(
                    budget_k,
                    self.policy.selection.period_seconds,
                    self.policy.selection.step_seconds,
                    self.policy.selection.min_risk,
                    self.policy.selection.target_precision,
                ),
                self.policy.reference,
            )
        self.rule = rule or FailureRule()
        self._selector = StepSelector(self.policy.selection)

    @property
    def horizon_hours(self) -> float:
        return self.loaded.spec.horizon_seconds / 3600.0

    @property
    def selection(self) -> SelectionRule:
        return self.policy.selection

    def risk_of(self, x: Matrix) -> npt.NDArray[np.float64]:
        """Calibrated probability of a failure within the horizon."""
        return self.policy.calibration.apply(self.loaded.model.score(x))

    def score(self, con: duckdb.DuckDBPyConnection, now: float) -> ScoredRound:
        """Risk for every GPU with samples in the feature window of the last complete step before `now`,
        ranked (1 = riskiest), and the picks of the selection rule at that step. The step still open at
        `now` is left out: training only ever saw complete steps, and a partial one would be stamped up to a
        step ahead of time."""
        spec = self.loaded.spec
        bucket_end = complete_bucket_end(now, spec.step_seconds)
        since = bucket_end - spec.window_steps * spec.step_seconds
        cur = con.cursor()  # temp views live in this cursor's session, not in the caller's
        try:
            inputs = register_store(cur, self.rule, since_ts=since, until_ts=bucket_end)
            artifact.check_schema(self.loaded, inputs.all_columns, "store gpu_samples", STORE_MODEL_HINT)
            names = build_instances(
                cur,
                self.loaded.feature_columns,
                spec,
                self.loaded.event_kinds,
                table="fg_live",
                categories=self.loaded.categories,
            )
            if names != self.loaded.feature_names:
                raise artifact.ArtifactError("store features differ from the model's feature schema")
            inst = latest_per_device(fetch_instances(cur, names, table="fg_live"))
            inst = inst.subset(inst.ts == bucket_end)
            hosts = dict(
                cur.execute(
                    "SELECT uuid, any_value(host) FROM gpu_samples "
                    f"WHERE {time_filter('ts', since, bucket_end)} GROUP BY uuid"
                ).fetchall()
            )
        finally:
            cur.close()
        if len(inst) == 0:
            return ScoredRound([])
        raw = self.loaded.model.score(inst.x)
        risk = self.policy.calibration.apply(raw)
        picks = self._selector.pick(bucket_end, inst.device_id, raw, risk >= self.selection.min_risk)
        # ranked by the raw score (calibration is monotone, and keeps the model's finer order among ties)
        order = np.lexsort((inst.device_id.astype(str), -np.where(np.isnan(raw), -np.inf, raw)))
        explain = sorted(set(order[:EXPLAIN_TOP].tolist()) | set(picks.tolist()))
        why = dict(
            zip(
                explain,
                drivers_vs_reference(
                    self.risk_of,
                    inst.x[explain],
                    self.policy.reference,
                    inst.feature_names,
                    fleet=inst.x,
                ),
                strict=True,
            )
        )
        by_index: dict[int, Prediction] = {}
        for rank, i in enumerate(order.tolist(), start=1):
            by_index[i] = Prediction(
                ts=bucket_end,
                host=str(hosts.get(inst.device_id[i], "")),
                device_id=str(inst.device_id[i]),
                risk=float(risk[i]),
                rank=rank,
                model_id=self.loaded.model_id,
                horizon_hours=self.horizon_hours,
                explanations=json.dumps([d.as_dict() for d in why.get(i, [])]),
                base_rate=self.policy.calibration.base_rate,
            )
        return ScoredRound([by_index[i] for i in order.tolist()], [by_index[i] for i in picks.tolist()])


def complete_bucket_end(now: float, step_seconds: float) -> float:
    """The end of the last step that has fully passed at `now` (a step ending exactly at `now` counts)."""
    return math.floor(now / step_seconds + 1e-9) * step_seconds


def _drivers(p: Prediction) -> object:
    """The features that raised the score, as stored with the prediction (a JSON list)."""
    return json.loads(p.explanations or "[]")


def at_risk_findings(
    picked: list[Prediction], policy: RiskPolicy, raised_at: float | None = None
) -> list[Finding]:
    """One "at_risk_gpu" finding per GPU the selection rule picked, stamped `raised_at` (default: the
    step's end). Always a warning: a prediction is a guess, so it asks for a checkpoint and a look, never
    for an immediate repair (data/policy.toml)."""
    rule = policy.selection
    base = policy.calibration.base_rate
    out = []
    for p in picked:
        out.append(
            Finding(
                ts=p.ts if raised_at is None else raised_at,
                finding_id=finding_id(FindingKind.AT_RISK_GPU, p.device_id, p.ts, p.model_id),
                kind=FindingKind.AT_RISK_GPU,
                severity=Severity.WARNING,
                subject=f"{p.host}/{p.device_id}",
                summary=f"GPU {p.device_id} on {p.host}: failure risk {p.risk:.0%} within "
                f"{p.horizon_hours:g} h (fleet base rate {base:.1%}; one of at most {rule.k} per "
                f"{rule.period_seconds / 3600.0:g} h, model {p.model_id})",
                host=p.host or None,
                gpu_uuid=p.device_id,
                evidence_json=evidence_json(
                    AtRiskEvidence(
                        risk=p.risk,
                        base_rate=base,
                        rank=p.rank,
                        model_id=p.model_id,
                        selection=rule.to_dict(),
                        horizon_hours=p.horizon_hours,
                        drivers=_drivers(p),
                    )
                ),
            )
        )
    return out
