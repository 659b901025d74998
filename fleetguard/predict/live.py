"""Live scoring: score every recently seen GPU from the store with a saved model, then pick the at-risk ones.

The features come from the same SQL as training, over the store's recent rows only. `risk` is the model's
calibrated probability of a failure within its horizon, and which GPUs are flagged is the model's own
selection rule (K per period, a device once per period, its risk floor) applied through the same
`predictor.selection.pick_step` the backtest measured it with. Never a hand-picked threshold on a raw score.

With `[predictor] average_retrains` = R > 1 the ranking the rule picks from is each GPU's within-step rank
averaged over the serving model and the R - 1 models that served before it (predictor.sliding_ensemble's
`mean_rank`, the function the backtest's `xgboost_avg` ranks with), so a retrain that happens to re-draw
its negatives differently moves a pick only when the retrains before it agree. `risk` stays the serving
model's calibrated probability: the averaged rank orders GPUs, it is not a probability.

The demo's model is built in demo_model.py: production scoring never imports the simulator.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import numpy.typing as npt

from fleetguard.predict.first_samples import FirstSamples
from fleetguard.predict.store_reader import STORE_MODEL_HINT, FailureRule, register_store, time_filter
from fleetguard.records.evidence import AtRiskEvidence, evidence_json
from fleetguard.records.findings import Finding, FindingKind, Severity, finding_id
from fleetguard.records.prediction import Prediction
from predictor import artifact
from predictor.dataset import Instances
from predictor.explain import drivers_vs_reference
from predictor.models import Matrix
from predictor.risk_policy import RiskPolicy
from predictor.selection import SelectionRule, StepSelector
from predictor.sliding_ensemble import mean_rank
from predictor.training import latest_per_device

log = logging.getLogger(__name__)

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
    rule, step by step, carrying the period's picks between rounds. `budget_k` > 0 replaces the model's K.
    `previous`: the models that served before this one, newest first, whose ranks are averaged with its own
    (`average_with`)."""

    def __init__(
        self,
        model_dir: Path,
        rule: FailureRule | None = None,
        budget_k: int = 0,
        previous: Sequence[artifact.LoadedModel] = (),
    ) -> None:
        self.loaded = artifact.load(model_dir)
        self.previous: tuple[artifact.LoadedModel, ...] = ()
        self.average_with(previous)
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
        self._first_samples = FirstSamples()  # each GPU's, for __growth: looked up once, not every round

    def average_with(self, previous: Sequence[artifact.LoadedModel]) -> None:
        """Average each step's ranks with these earlier models from the next round on (none: this model's
        own ranking). One of another dataset shape is left out, with one log line: its steps are not this
        model's."""
        kept: list[artifact.LoadedModel] = []
        for p in previous:
            if _same_steps(p, self.loaded):
                kept.append(p)
            else:
                log.warning(
                    "model %s is left out of the rank average: its window, horizon or step differ from %s's",
                    p.model_id,
                    self.loaded.model_id,
                )
        self.previous = tuple(kept)

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
            inputs = register_store(
                cur, self.rule, since_ts=since, until_ts=bucket_end, first_samples=self._first_samples
            )
            artifact.check_schema(self.loaded, inputs.all_columns, "store gpu_samples", STORE_MODEL_HINT)
            inst = _step_instances(cur, self.loaded, bucket_end)
            earlier = [
                _earlier_scores(cur, p, inputs.all_columns, bucket_end, (self.loaded, inst))
                for p in self.previous
            ]
            # one that cannot score this store is dropped (one log line), not retried every round
            self.previous = tuple(p for p, e in zip(self.previous, earlier, strict=True) if e is not None)
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
        ranking = averaged_ranking(raw, [e for e in earlier if e is not None], bucket_end)
        picks = self._selector.pick(bucket_end, inst.device_id, ranking, risk >= self.selection.min_risk)
        # ranked as picked; among ties by the raw score (calibration is monotone, and keeps the model's finer
        # order among ties)
        order = np.lexsort(
            (
                inst.device_id.astype(str),
                -np.where(np.isnan(raw), -np.inf, raw),
                -np.where(np.isnan(ranking), -np.inf, ranking),
            )
        )
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


def averaged_ranking(
    current: npt.NDArray[np.float64], earlier: Sequence[npt.NDArray[np.float64]], step_ts: float
) -> npt.NDArray[np.float64]:
    """What the selection rule ranks one step by: the current model's raw scores alone, or with earlier
    models' scores of the same GPUs, each GPU's within-step rank averaged over them all (the backtest's
    `mean_rank`: live equals backtest). `earlier` is newest first; the ranks are summed oldest first, as the
    backtest's history holds them, so that rounding breaks no tie differently."""
    if not earlier:
        return current
    return mean_rank([*reversed(earlier), current], np.full(len(current), step_ts))


def _same_steps(a: artifact.LoadedModel, b: artifact.LoadedModel) -> bool:
    return (a.spec.window_seconds, a.spec.horizon_seconds, a.spec.step_seconds) == (
        b.spec.window_seconds,
        b.spec.horizon_seconds,
        b.spec.step_seconds,
    )


def _same_features(a: artifact.LoadedModel, b: artifact.LoadedModel) -> bool:
    return (a.feature_columns, a.event_kinds, a.categories, a.feature_names) == (
        b.feature_columns,
        b.event_kinds,
        b.categories,
        b.feature_names,
    )


def _step_instances(
    cur: duckdb.DuckDBPyConnection, loaded: artifact.LoadedModel, step_ts: float
) -> Instances:
    """`loaded`'s features of each GPU at the step ending `step_ts`, from the registered store views."""
    inst = latest_per_device(artifact.model_instances(cur, loaded, "fg_live"))
    return inst.subset(inst.ts == step_ts)


def _earlier_scores(
    cur: duckdb.DuckDBPyConnection,
    loaded: artifact.LoadedModel,
    columns: tuple[str, ...],
    step_ts: float,
    serving: tuple[artifact.LoadedModel, Instances],
) -> npt.NDArray[np.float64] | None:
    """An earlier model's raw scores of `device_id` at the step (from its own features: a retrain may keep
    other event kinds or categories); NaN, ranked last, for a GPU it has no features of. None, with one
    log line, when it cannot score this store: the average goes on without it. `serving`: the serving
    model and its instances of the step, reused when this model's features are the same (most retrains
    keep the same columns; the feature SQL is the round's main cost)."""
    current, current_inst = serving
    device_id = current_inst.device_id
    try:
        artifact.check_schema(loaded, columns, "store gpu_samples")
        inst = current_inst if _same_features(loaded, current) else _step_instances(cur, loaded, step_ts)
    except (artifact.ArtifactError, duckdb.Error) as exc:
        log.warning("model %s is left out of this round's rank average: %s", loaded.model_id, exc)
        return None
    out = np.full(len(device_id), np.nan)
    if len(inst) == 0:
        return out
    scores = loaded.model.score(inst.x)
    where = {str(d): i for i, d in enumerate(inst.device_id.tolist())}
    for j, d in enumerate(device_id.tolist()):
        i = where.get(str(d))
        if i is not None:
            out[j] = scores[i]
    return out


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
