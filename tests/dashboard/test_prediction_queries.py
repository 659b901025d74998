"""The predictions the dashboard shows carry the model's base rate and each driver's fleet percentile."""

from __future__ import annotations

import json
from pathlib import Path

from dashboard.pages.predictions import explain
from dashboard.queries.predictions import drivers, latest_risks
from fleetguard.records.prediction import Prediction
from fleetguard.store import Store

T0 = 1_700_000_000.0


def test_latest_risk_carries_its_base_rate_and_drivers_their_percentile(tmp_path: Path) -> None:
    why = [
        {"feature": "ecc__max", "value": 120.0, "contribution": 0.4, "reference": 0.0, "percentile": 97.2},
        {"feature": "temp__mean", "value": 71.0, "contribution": 0.1},  # a score from before percentiles
        {"feature": "bad", "value": 1.0, "contribution": 0.05, "percentile": 250.0},  # out of range: dropped
    ]
    with Store.open(tmp_path / "s.duckdb") as store:
        store.append(
            [
                Prediction(T0, "h", "GPU-a", 0.58, 1, "m", 6.0, json.dumps(why), base_rate=0.041),
                Prediction(T0, "h", "GPU-b", 0.01, 2, "m", 6.0),  # written without a base rate
            ]
        )
        risks = latest_risks(store.cursor(), T0 + 60)
    assert [(r.device_id, r.base_rate) for r in risks] == [("GPU-a", 0.041), ("GPU-b", None)]
    found = drivers(risks[0].explanations)
    assert [d.percentile for d in found] == [97.2, None, None]
    assert found[0].label() == "ecc__max = 120 (p97)"
    assert found[1].label() == "temp__mean = 71"
    assert explain(risks[0]).startswith("ecc__max = 120 (p")
