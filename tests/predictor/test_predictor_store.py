"""fleetguard's own store as predictor input, and live scoring of the store's GPUs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from fleetguard.predict.cli import evaluate_command
from fleetguard.predict.demo_model import HOURLY_DEMO, train_demo_model
from fleetguard.predict.first_samples import FirstSamples
from fleetguard.predict.live import LiveScorer, at_risk_findings, complete_bucket_end
from fleetguard.predict.store_reader import FailureRule, register_store
from fleetguard.records.prediction import Prediction
from fleetguard.records.telemetry import Event, EventKind, GpuSample
from fleetguard.store import Store
from predictor import artifact
from predictor.dataset import DatasetSpec, build_instances, fetch_instances

HOUR = 3600.0
T0 = 1_700_000_000.0


def _samples(hours: int, gpus: int = 4, hot_gpu: int = 0) -> list[GpuSample]:
    out = []
    for h in range(hours):
        for g in range(gpus):
            ramp = max(0.0, (h - hours + 12) / 12) if g == hot_gpu else 0.0
            out.append(
                GpuSample(
                    ts=T0 + h * HOUR,
                    host="node1",
                    gpu_index=g,
                    uuid=f"GPU-{g}",
                    pci_bus_id=f"0000:0{g}:00.0",
                    temperature_celsius=60.0 + 25 * ramp,
                    power_watts=300.0,
                    utilization_gpu_percent=90.0,
                    utilization_memory_percent=50.0,
                    ecc_corrected_aggregate=int(1000 * ramp * h),
                    ecc_uncorrected_aggregate=0,
                    remapped_rows_corrected=int(10 * ramp),
                    pcie_replay_errors=0,
                    nvlink_crc_flit_errors=0,
                )
            )
    return out


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.duckdb"
    with Store.open(path) as store:
        store.append(_samples(48))
        store.append(
            [
                Event(
                    ts=T0 + 10 * HOUR,
                    host="node1",
                    kind=EventKind.XID,
                    source="kmsg",
                    message="Xid 79",
                    code=79,
                    pci_bus_id="0000:01:00.0",
                ),
                Event(
                    ts=T0 + 11 * HOUR,
                    host="node1",
                    kind=EventKind.XID,
                    source="kmsg",
                    message="Xid 13",
                    code=13,
                    gpu_index=2,
                ),
                Event(
                    ts=T0 + 12 * HOUR,
                    host="node1",
                    kind=EventKind.GPU_LOST,
                    source="nvml",
                    message="lost",
                    gpu_index=3,
                ),
            ]
        )
    return path


def test_fatal_xids_and_lost_gpus_become_failures_of_the_right_gpu(store_path: Path) -> None:
    con = duckdb.connect(str(store_path), read_only=True)
    inputs = register_store(con)
    failures = con.execute("SELECT device_id, ts - ?, kind FROM fg_failures ORDER BY ts", [T0]).fetchall()
    assert failures == [("GPU-1", 10 * HOUR, "xid_79"), ("GPU-3", 12 * HOUR, "gpu_lost")]
    assert con.execute("SELECT device_id, kind FROM fg_events").fetchall() == [("GPU-2", "xid_13")]
    assert "temperature_celsius" in inputs.feature_columns and "gpu_index" not in inputs.feature_columns


def test_which_xids_are_failures_is_configurable(store_path: Path) -> None:
    con = duckdb.connect(str(store_path), read_only=True)
    register_store(con, FailureRule(kinds=(), fatal_xids=(13,)))
    assert con.execute("SELECT device_id FROM fg_failures").fetchall() == [("GPU-2",)]


def test_samples_from_the_store_carry_uuid_and_epoch_seconds(store_path: Path) -> None:
    con = duckdb.connect(str(store_path), read_only=True)
    register_store(con)
    row = con.execute("SELECT device_id, min(ts) FROM fg_samples GROUP BY ALL ORDER BY 1 LIMIT 1").fetchone()
    assert row == ("GPU-0", T0)


def test_evaluate_reads_the_store_and_says_when_history_is_too_short(store_path: Path) -> None:
    result = CliRunner().invoke(evaluate_command, ["--store", str(store_path), "--quiet"])
    assert result.exit_code != 0 and "history too short" in result.output


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_demo_model(tmp_path_factory.mktemp("demo") / "model", seed=0, shape=HOURLY_DEMO)


def test_live_scorer_ranks_every_recent_gpu(store_path: Path, demo_model: Path) -> None:
    con = duckdb.connect(str(store_path))
    preds = LiveScorer(demo_model).score(con, now=T0 + 48 * HOUR).predictions
    assert sorted(p.device_id for p in preds) == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert [p.rank for p in preds] == [1, 2, 3, 4]
    assert all(0.0 <= p.risk <= 1.0 and p.host == "node1" and p.horizon_hours == 72.0 for p in preds)
    assert preds[0].device_id == "GPU-0"  # the one heating up with an ECC ramp


def test_live_scorer_ignores_gpus_not_seen_in_the_feature_window(store_path: Path, demo_model: Path) -> None:
    con = duckdb.connect(str(store_path))
    assert LiveScorer(demo_model).score(con, now=T0 + 30 * 24 * HOUR).predictions == []


def test_live_scorer_leaves_no_views_in_the_callers_session(store_path: Path, demo_model: Path) -> None:
    con = duckdb.connect(str(store_path))
    LiveScorer(demo_model).score(con, now=T0 + 48 * HOUR)
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert "fg_samples" not in names


def test_findings_are_warnings_for_the_picked_gpus_only(demo_model: Path) -> None:
    policy = LiveScorer(demo_model).policy
    picked = [
        Prediction(ts=1.0, host="h", device_id="GPU-a", risk=0.9, rank=1, model_id="m", horizon_hours=72.0),
    ]
    findings = at_risk_findings(picked, policy)
    assert [(f.gpu_uuid, f.severity, f.kind) for f in findings] == [("GPU-a", "warning", "at_risk_gpu")]
    evidence = json.loads(findings[0].evidence_json)
    assert findings[0].subject == "h/GPU-a" and evidence["risk"] == 0.9
    assert evidence["base_rate"] == policy.calibration.base_rate
    assert evidence["selection"]["k"] == policy.selection.k
    assert "base rate" in findings[0].summary


def test_demo_model_is_deterministic_under_its_seed(tmp_path: Path, demo_model: Path) -> None:
    again = train_demo_model(tmp_path / "again", seed=0, shape=HOURLY_DEMO)
    x = np.random.default_rng(0).normal(size=(50, len(LiveScorer(demo_model).loaded.feature_names)))
    a = LiveScorer(demo_model).loaded.model.score(x.astype(np.float32))
    b = LiveScorer(again).loaded.model.score(x.astype(np.float32))
    np.testing.assert_array_equal(a, b)


def test_live_features_see_failures_from_before_the_feature_window_as_training_does(store_path: Path) -> None:
    con = duckdb.connect()
    con.execute(f"ATTACH '{store_path}' AS fgstore (READ_ONLY)")
    now = T0 + 47 * HOUR  # GPU-1 failed (XID 79) at hour 10, long before a 6-hour window
    register_store(con, FailureRule(), schema="fgstore", since_ts=now - 7 * HOUR, until_ts=now)
    failures = con.execute("SELECT device_id, ts FROM fg_failures").fetchall()
    assert ("GPU-1", T0 + 10 * HOUR) in failures
    counted = con.execute("SELECT count(*) FROM fg_events WHERE ts < ?", [now - 7 * HOUR]).fetchone()
    assert counted == (0,)  # other events still only inside the window


def test_live_features_see_growth_since_the_gpus_first_sample_as_training_does(store_path: Path) -> None:
    """`__growth` is the rise since a GPU was first seen: the live views (only the feature window's samples
    and the scorer's kept first samples) give every feature of each scored step the same value as the whole
    history does in training, round after round, for a GPU seen from the start and for one first seen
    inside an earlier round's window."""
    spec = DatasetSpec(window_seconds=6 * HOUR, horizon_seconds=6 * HOUR, step_seconds=HOUR)
    with Store.open(store_path) as store:  # a GPU added at hour 40: inside the first round's window
        late = [s for s in _samples(48, gpus=4, hot_gpu=0) if s.gpu_index == 0 and s.ts >= T0 + 40 * HOUR]
        store.append(
            [dataclasses.replace(s, gpu_index=4, uuid="GPU-late", pci_bus_id="0000:05:00.0") for s in late]
        )
    kept = FirstSamples()
    last = complete_bucket_end(T0 + 47 * HOUR, HOUR)  # GPU-0's ECC rose over the last 12 h: more than W
    for end in (last - 3 * HOUR, last - 2 * HOUR, last - HOUR, last):
        features: dict[str, dict[str, float]] = {}
        for name, since in (("history", None), ("live", end - spec.window_steps * HOUR)):
            con = duckdb.connect()
            con.execute(f"ATTACH '{store_path}' AS fgstore (READ_ONLY)")
            inputs = register_store(con, schema="fgstore", since_ts=since, until_ts=end, first_samples=kept)
            names = build_instances(con, inputs.all_columns, spec, kinds=())
            inst = fetch_instances(con, names)
            at_end = inst.subset(inst.ts == end)
            features[name] = {
                f"{d}/{n}": float(v)
                for d, row in zip(at_end.device_id, at_end.x, strict=True)
                for n, v in zip(names, row, strict=True)
            }
            con.close()
        growth, delta = "GPU-0/ecc_corrected_aggregate__growth", "GPU-0/ecc_corrected_aggregate__delta"
        assert features["history"][growth] > features["history"][delta]
        assert "GPU-late/ecc_corrected_aggregate__growth" in features["live"]
        assert features["live"] == pytest.approx(features["history"], nan_ok=True)
    assert "GPU-late" in kept.found  # first seen at hour 40: found once the window moved past it


def test_live_scoring_reads_complete_steps_only(store_path: Path, demo_model: Path) -> None:
    # Steps are whole hours of epoch time. At `end` + 0.9 h the step after `end` is still open: the scores
    # are those of the step that ended at `end`, stamped `end`, and nothing written into the open step
    # changes them.
    end = complete_bucket_end(T0 + 46.5 * HOUR, HOUR)
    con = duckdb.connect(str(store_path))
    scorer = LiveScorer(demo_model)
    at_end = {p.device_id: p.risk for p in scorer.score(con, now=end).predictions}
    mid = scorer.score(con, now=end + 0.9 * HOUR).predictions
    assert {p.device_id: p.risk for p in mid} == at_end and {p.ts for p in mid} == {end}
    con.close()
    with Store.open(store_path) as store:
        hot = _samples(48, gpus=4, hot_gpu=3)[-1]
        store.append([dataclasses.replace(hot, ts=end + 0.5 * HOUR, temperature_celsius=99.0)])
    con = duckdb.connect(str(store_path))
    assert {p.device_id: p.risk for p in scorer.score(con, now=end + 0.9 * HOUR).predictions} == at_end


def test_live_predictions_carry_the_features_that_drove_them(store_path: Path, demo_model: Path) -> None:
    import json

    con = duckdb.connect(str(store_path))
    scorer = LiveScorer(demo_model)
    preds = scorer.score(con, now=T0 + 48 * HOUR).predictions
    top = json.loads(preds[0].explanations)
    assert top and all(d["feature"] in scorer.loaded.feature_names and d["contribution"] > 0 for d in top)
    # measured from a typical healthy device: a driver's value differs from its reference
    assert all(d["value"] != d["reference"] for d in top)
    # and placed in the fleet scored with it
    assert all(0 < d["percentile"] <= 100 for d in top)


def test_a_model_that_does_not_fit_the_store_says_what_is_missing_and_how_to_get_one(
    store_path: Path, tmp_path: Path
) -> None:
    from fleetguard.predict.cli import predict_command, train_command
    from fleetguard.predict.simulate_cli import simulate_history_command
    from fleetguard.predict.store_reader import gpu_feature_columns

    def train(columns: str) -> Path:
        history, model = tmp_path / f"history-{columns}", tmp_path / f"model-{columns}"
        made = CliRunner().invoke(
            simulate_history_command,
            [str(history), "--gpus", "80", "--days", "30", "--seed", "3", "--columns", columns],
        )
        assert made.exit_code == 0, made.output
        samples, failures = history / "samples", history / "failures.parquet"
        args = ["--samples", str(samples), "--failures", str(failures), "--model", "logistic"]
        trained = CliRunner().invoke(train_command, [*args, "--out", str(model), "--quiet"])
        assert trained.exit_code == 0, trained.output
        return model

    contract = CliRunner().invoke(
        predict_command, ["--model", str(train("contract")), "--store", str(store_path)]
    )
    assert contract.exit_code != 0
    message = contract.output.strip().splitlines()[-1]
    assert "xid_count" in message and "sku" in message and "driver_version" in message
    assert "fleetguard train --store" in message and "simulate-history OUT --columns store" in message
    # the history written with the store's columns trains a model that scores the store
    model = train("store")
    assert set(artifact.load(model).input_columns) <= set(gpu_feature_columns())
    scored = CliRunner().invoke(
        predict_command, ["--model", str(model), "--store", str(store_path), "--json"]
    )
    assert scored.exit_code == 0, scored.output
    assert {p["device_id"] for p in json.loads(scored.output)["predictions"]} == {
        "GPU-0",
        "GPU-1",
        "GPU-2",
        "GPU-3",
    }


def test_live_explanations_are_stored_with_the_prediction(tmp_path: Path) -> None:
    pred = Prediction(
        ts=T0,
        host="h",
        device_id="GPU-a",
        risk=0.9,
        rank=1,
        model_id="m",
        horizon_hours=72.0,
        explanations='[{"feature": "temperature_celsius__max", "value": 91.0, "contribution": 1.2}]',
    )
    with Store.open(tmp_path / "s.duckdb") as store:
        store.append([pred])
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    assert con.execute("SELECT explanations FROM predictions").fetchone() == (pred.explanations,)


def test_production_scoring_does_not_import_the_simulator() -> None:
    import subprocess
    import sys

    probe = "import sys, fleetguard.predict.live; print(sorted(m for m in sys.modules if 'simulat' in m))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
