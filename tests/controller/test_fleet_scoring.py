"""The controller scores the fleet: `[predictor] model_dir` on a real `fleetguard controller`, fed by a real
`fleetguard agent --simulate 1x8` on loopback. Every GPU the agent ships is scored from the controller's own
store, with explanations; the model's selection rule raises at-risk warnings, which the controller's incident
pipeline opens as incidents that only watch."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb
import pytest

from fleetguard.predict.demo_model import train_demo_model
from tests.controller.fleet_processes import Fleet, free_port, stop, summary

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

AGENT_SECONDS = 160  # the scripted ECC ramp (30 s on, over 100 s) must show in complete one-minute steps


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_demo_model(tmp_path_factory.mktemp("model") / "demo", seed=0)


def test_a_controller_with_a_model_scores_its_agents_gpus(tmp_path: Path, model_dir: Path) -> None:
    fleet = Fleet(tmp_path, free_port())
    try:
        controller = fleet.start_controller(
            f'[predictor]\nmodel_dir = "{model_dir}"\nscore_interval_seconds = 2.0\n'
        )
        agent = fleet.start_agent("gpu-a", seed=1, duration=AGENT_SECONDS, simulate="1x8")
        fleet.wait_for_hosts({"gpu-a"})
        done = summary(agent, timeout=AGENT_SECONDS + 120)
        time.sleep(4.0)  # two more scoring rounds over the last rows shipped
        stop(controller)
    finally:
        fleet.cleanup()
    assert done["extras"]["unsent_batches"] == 0
    log = (tmp_path / "controller.log").read_text()
    assert "scoring is off" not in log and "live scoring failed" not in log, log
    con = duckdb.connect(str(fleet.store), read_only=True)
    try:
        gpus = {str(r[0]) for r in con.execute("SELECT DISTINCT uuid FROM gpu_samples").fetchall()}
        scored = con.execute(
            "SELECT device_id, any_value(host), min(risk), max(risk), count(DISTINCT ts), "
            "any_value(model_id) FROM predictions GROUP BY device_id"
        ).fetchall()
        assert len(gpus) == 8 and {str(r[0]) for r in scored} == gpus
        assert all(
            host == "gpu-a" and 0 <= lo <= hi <= 1 and model == "demo-xgboost-seed0"
            for _, host, lo, hi, _, model in scored
        )
        assert max(r[4] for r in scored) >= 2  # scored step after step, not once
        explained = con.execute(
            "SELECT explanations FROM predictions WHERE rank = 1 ORDER BY ts DESC LIMIT 1"
        ).fetchone()
        assert explained is not None and all("reference" in d for d in json.loads(explained[0]))
        flagged = con.execute(
            "SELECT gpu_uuid, severity, host FROM findings WHERE kind = 'at_risk_gpu'"
        ).fetchall()
        assert flagged and all(sev == "warning" and host == "gpu-a" for _, sev, host in flagged)
        incidents = con.execute(
            "SELECT component_id, severity, action FROM incidents WHERE fault = 'finding:at_risk_gpu'"
        ).fetchall()
        assert {str(r[0]) for r in incidents} == {str(r[0]) for r in flagged}
        assert all(sev == "warning" and action == "watch" for _, sev, action in incidents)
    finally:
        con.close()


@pytest.mark.parametrize("what", ["missing", "uncalibrated"])
def test_a_model_that_cannot_score_live_is_one_log_line_and_no_task(
    tmp_path: Path, model_dir: Path, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    import dataclasses
    import shutil

    from fleetguard.config import Config
    from fleetguard.controller.analysis import fleet_scoring

    target = tmp_path / "model"
    if what == "uncalibrated":  # saved before calibration: the risk policy is absent
        shutil.copytree(model_dir, target)
        meta = json.loads((target / "model.json").read_text())
        del meta["risk_policy"]
        (target / "model.json").write_text(json.dumps(meta))
    config = Config()
    config = dataclasses.replace(
        config, predictor=dataclasses.replace(config.predictor, model_dir=str(target))
    )
    assert fleet_scoring(config) is None
    [line] = [r.getMessage() for r in caplog.records if "scoring is off" in r.getMessage()]
    assert ("retrain" in line) if what == "uncalibrated" else ("not a model directory" in line)
