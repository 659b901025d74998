"""Live scoring for `fleetguard up`: score every recently seen GPU from the store with a saved model.

The features come from the same SQL as training, over the store's recent rows only. `train_demo_model`
builds a small model on simulated history so the demo has live risk scores without any real fleet data.
"""

from __future__ import annotations

import json
import math
import tempfile
import uuid as uuid_mod
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from fleetguard.predict.contract import register_inputs
from fleetguard.predict.simulated_history import HistorySpec, write_parquet
from fleetguard.predict.store_reader import FailureRule, register_store, time_filter
from fleetguard.records.findings import Finding
from fleetguard.records.prediction import Prediction
from predictor import artifact
from predictor.dataset import DatasetSpec, build_instances, data_end_ts, fetch_instances
from predictor.explain import top_drivers
from predictor.training import latest_per_device, train_from_views


@dataclass(frozen=True)
class DemoShape:
    """How a demo model is cut: its dataset spec and the simulated history it is trained on."""

    spec: DatasetSpec
    history_steps: int
    n_gpus: int
    failure_rate: float


# `fleetguard up` scores in minutes (features over the last 30 one-minute steps, failures within 6 h), so a
# fresh demo store has a complete step to score a minute after start; an hourly model would have nothing
# complete to score for up to an hour.
MINUTE_DEMO = DemoShape(DatasetSpec(30 * 60.0, 6 * 3600.0, step_seconds=60.0), 2 * 24 * 60, 80, 0.5)
# Hourly steps, a 6 h window and a 3-day horizon: the shape of a real fleet model.
HOURLY_DEMO = DemoShape(DatasetSpec(6 * 3600.0, 3 * 86400.0, step_seconds=3600.0), 24 * 30, 120, 0.35)


def train_demo_model(out_dir: Path, seed: int = 0, shape: DemoShape = MINUTE_DEMO) -> Path:
    """Train an XGBoost on a small simulated fleet history (seconds on one core) and save it to `out_dir`."""
    spec = HistorySpec(
        n_gpus=shape.n_gpus,
        n_steps=shape.history_steps,
        step_seconds=shape.spec.step_seconds,
        failure_rate=shape.failure_rate,
        new_batch_share=0.0,
        weak_sku_factor=1.0,
        seed=seed,
    )
    with tempfile.TemporaryDirectory() as tmp:
        samples, failures, _ = write_parquet(spec, Path(tmp))
        con = duckdb.connect()
        try:
            inputs = register_inputs(con, samples, failures)
            # Only GpuSample columns: the live store has no simulator-only columns such as xid_count.
            from fleetguard.predict.store_reader import gpu_feature_columns

            columns = tuple(c for c in inputs.feature_columns if c in gpu_feature_columns())
            trained = train_from_views(
                con, columns, "xgboost", shape.spec, data_end_ts(con), None, seed=seed, n_jobs=1
            )
        finally:
            con.close()
    return artifact.save(
        out_dir,
        trained.model,
        shape.spec,
        columns,
        trained.event_kinds,
        trained.feature_names,
        trained.window,
        {
            "train_rows": trained.rows,
            "train_positives": trained.positives,
            "train_pr_auc": trained.train_pr_auc,
        },
        model_id=f"demo-xgboost-seed{seed}",
    )


class LiveScorer:
    """Scores the GPUs of a store connection with the model saved in `model_dir`."""

    def __init__(self, model_dir: Path, rule: FailureRule | None = None) -> None:
        self.loaded = artifact.load(model_dir)
        self.rule = rule or FailureRule()

    @property
    def horizon_hours(self) -> float:
        return self.loaded.spec.horizon_seconds / 3600.0

    def score(self, con: duckdb.DuckDBPyConnection, now: float) -> list[Prediction]:
        """Risk for every GPU with samples in the feature window of the last complete step before `now`,
        ranked (1 = riskiest). The step still open at `now` is left out: training only ever saw complete
        steps, and a partial one would be stamped up to a step ahead of time."""
        spec = self.loaded.spec
        bucket_end = complete_bucket_end(now, spec.step_seconds)
        since = bucket_end - spec.window_steps * spec.step_seconds
        cur = con.cursor()  # temp views live in this cursor's session, not in the caller's
        try:
            inputs = register_store(cur, self.rule, since_ts=since, until_ts=bucket_end)
            artifact.check_schema(self.loaded, inputs.all_columns, "store gpu_samples")
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
            return []
        risk = np.clip(self.loaded.model.score(inst.x), 0.0, 1.0)
        order = np.argsort(-risk, kind="stable")
        drivers = top_drivers(self.loaded.model, inst.x[order], inst.feature_names)
        return [
            Prediction(
                ts=bucket_end,
                host=str(hosts.get(inst.device_id[i], "")),
                device_id=str(inst.device_id[i]),
                risk=float(risk[i]),
                rank=rank,
                model_id=self.loaded.model_id,
                horizon_hours=self.horizon_hours,
                explanations=json.dumps([d.as_dict() for d in why]),
            )
            for rank, (i, why) in enumerate(zip(order.tolist(), drivers, strict=True), start=1)
        ]


def complete_bucket_end(now: float, step_seconds: float) -> float:
    """The end of the last step that has fully passed at `now` (a step ending exactly at `now` counts)."""
    return math.floor(now / step_seconds + 1e-9) * step_seconds


def at_risk_findings(predictions: list[Prediction], threshold: float) -> list[Finding]:
    """One "at_risk_gpu" finding per prediction at or above `threshold` (critical from 0.8)."""
    out = []
    for p in predictions:
        if p.risk < threshold:
            continue
        out.append(
            Finding(
                ts=p.ts,
                finding_id=str(
                    uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, f"at_risk/{p.device_id}/{p.ts}/{p.model_id}")
                ),
                kind="at_risk_gpu",
                severity="critical" if p.risk >= 0.8 else "warning",
                subject=f"{p.host}/{p.device_id}",
                summary=f"GPU {p.device_id} on {p.host}: failure risk {p.risk:.2f} "
                f"within {p.horizon_hours:g} h "
                f"(rank {p.rank}, model {p.model_id})",
                host=p.host or None,
                gpu_uuid=p.device_id,
                evidence_json=json.dumps(
                    {
                        "risk": p.risk,
                        "rank": p.rank,
                        "model_id": p.model_id,
                        "threshold": threshold,
                        "horizon_hours": p.horizon_hours,
                        "drivers": json.loads(p.explanations or "[]"),
                    }
                ),
            )
        )
    return out
