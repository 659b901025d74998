"""`fleetguard model promote|rollback` left beside a store a running process holds: the process's retraining
task carries them out inside its maintenance transaction, audited with the user who asked."""

from __future__ import annotations

from pathlib import Path

from fleetguard.clock import SystemClock
from fleetguard.config import load_config
from fleetguard.controller.maintenance import Maintenance
from fleetguard.predict.retraining import RetrainTask
from fleetguard.store import Store
from fleetguard.store import model_registry as reg
from fleetguard.store.operator_requests import Request, append, request_path


def test_requests_beside_the_store_are_carried_out_in_order(tmp_path: Path) -> None:
    path = tmp_path / "fleet.duckdb"
    model_dir = tmp_path / "models"
    for model_id in ("m1", "m2"):
        (model_dir / "models" / model_id).mkdir(parents=True)
        (model_dir / "models" / model_id / "model.json").write_text("{}")
    config = load_config(overrides={"store.path": str(path), "predictor.model_dir": str(model_dir)})
    with Store.open(path) as store:
        for i, model_id in enumerate(("m1", "m2"), start=1):
            record = reg.ModelRecord(model_id, float(i), 0.0, 1.0, reg.ModelState.CANDIDATE, {})
            reg.add_model(store.connection, record, "retrain gate")
        append(str(path), Request.MODEL_OPS, {"op": "promote", "model_id": "m1", "actor": "alice@h"})
        append(str(path), Request.MODEL_OPS, {"op": "promote", "model_id": "m2", "actor": "alice@h"})
        append(str(path), Request.MODEL_OPS, {"op": "promote", "model_id": "gone", "actor": "alice@h"})
        append(str(path), Request.MODEL_OPS, {"op": "rollback", "actor": "bob@h"})
        maintenance = Maintenance(store, SystemClock())
        maintenance.every(0.0, "retraining", RetrainTask(config.predictor, str(path), model_dir))
        cursor = store.cursor()
        try:
            maintenance.run_due(cursor)
            active = reg.active_model(cursor)
            log = [(e.model_id, e.action, e.actor) for e in reg.history(cursor)]
        finally:
            cursor.close()
    assert not request_path(str(path), Request.MODEL_OPS).exists()
    assert active is not None and active.model_id == "m1"  # m1, m2, (unknown refused), back to m1
    assert ("m2", reg.LogAction.ROLLED_BACK, "bob@h") in log
    assert ("m1", reg.LogAction.PROMOTED, "alice@h") in log
