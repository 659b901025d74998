"""The demo's model: trained on simulated history shaped like the simulated fleet `up --simulate` samples.

A model only means something on data like its training data. The demo fleet (collectors/simulated_*) is
busy H100s near 600 W and 65 C, and a few percent of a real fleet's GPUs fail within a horizon, so the
history it learns from is drawn around that operating point with a fleet-like failure rate; trained on a
history where half the GPUs fail, or on a 280 W fleet, every quiet demo GPU looked like a failing one.

Production scoring (live.py) never imports this module or the simulator.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from fleetguard.predict.contract import register_inputs
from fleetguard.predict.simulated_history import HistorySpec, write_parquet
from fleetguard.predict.store_reader import gpu_feature_columns
from predictor.dataset import DatasetSpec, data_end_ts
from predictor.training import PolicyOptions, save_trained, train_from_views


@dataclass(frozen=True)
class DemoShape:
    """How a demo model is cut: its dataset spec, the simulated history it is trained on, and its policy."""

    spec: DatasetSpec
    history: HistorySpec
    options: PolicyOptions


# `fleetguard up` scores in minutes (features over the last 30 one-minute steps, failures within 6 h), so a
# fresh demo store has a complete step to score a minute after start. One day of 100 GPUs of which ~8% fail
# in the day: about 2% fail within any 6 h, a busy fleet's order of magnitude rather than the half of all
# GPUs an earlier demo history used; 150 GPUs passed the demo's tests too and took half again as long to
# train (the cost is the rows: four XGBoost fits, the model and three calibration folds). K = 2 per hour
# fleet-wide and a risk floor fixed on out-of-fold scores for 50% precision: on a 16-GPU demo a quiet GPU
# is not flagged merely for being the least quiet.
MINUTE_DEMO = DemoShape(
    spec=DatasetSpec(30 * 60.0, 6 * 3600.0, step_seconds=60.0),
    history=HistorySpec(
        n_gpus=100,
        n_steps=24 * 60,
        step_seconds=60.0,
        failure_rate=0.08,
        new_batch_share=0.0,
        weak_sku_factor=1.0,
        utilization_mean=91.0,
        utilization_sd=5.0,
        temperature_base_mean=51.0,
        temperature_base_sd=3.0,
        power_base_mean=450.0,
        power_base_sd=30.0,
    ),
    options=PolicyOptions(period_seconds=3600.0, k=2, target_precision=0.5),
)
# Hourly steps, a 6 h window and a 3-day horizon: the shape of a real fleet model (about 3.5% of the GPUs
# fail within a horizon), on the default mixed fleet; K from the training window's failures, per step.
HOURLY_DEMO = DemoShape(
    spec=DatasetSpec(6 * 3600.0, 3 * 86400.0, step_seconds=3600.0),
    history=HistorySpec(
        n_gpus=120,
        n_steps=24 * 30,
        step_seconds=3600.0,
        failure_rate=0.35,
        new_batch_share=0.0,
        weak_sku_factor=1.0,
    ),
    options=PolicyOptions(),
)


def train_demo_model(out_dir: Path, seed: int = 0, shape: DemoShape = MINUTE_DEMO) -> Path:
    """Train an XGBoost on the demo history (tens of seconds on one core) and save it to `out_dir`."""
    history = dataclasses.replace(shape.history, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        samples, failures, _ = write_parquet(history, Path(tmp))
        con = duckdb.connect()
        try:
            inputs = register_inputs(con, samples, failures)
            # Only GpuSample columns: the live store has no simulator-only columns such as xid_count.
            columns = tuple(c for c in inputs.feature_columns if c in gpu_feature_columns())
            trained = train_from_views(
                con,
                columns,
                "xgboost",
                shape.spec,
                data_end_ts(con),
                None,
                seed=seed,
                n_jobs=1,
                options=shape.options,
            )
        finally:
            con.close()
    return save_trained(out_dir, trained, shape.spec, columns, model_id=f"demo-xgboost-seed{seed}")
