"""The controller scores the fleet: `[predictor] model_dir` on a real `fleetguard controller`, fed by a real
`fleetguard agent --simulate 1x8` on loopback. Every GPU the agent ships is scored from the controller's own
store, with explanations; the model's selection rule raises at-risk warnings, which the controller's incident
pipeline opens as incidents that only watch."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest

from fleetguard.predict.demo_model import MINUTE_DEMO, DemoShape, train_demo_model
from predictor.dataset import DatasetSpec
from tests.controller.fleet_processes import Fleet, free_port, stop, summary

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

# The demo model's shape (fleetguard.predict.demo_model.MINUTE_DEMO) at 3 s steps: the same features over 30
# steps, its selection rule per 60 steps, a 60-step horizon, on a smaller history of the same operating point.
# Its steps complete twenty times sooner than the demo's one-minute steps, so two of them are scored seconds
# after the agent's first rows instead of one to two minutes (5 s steps: about 5 s more per run).
STEP_SECONDS = 3.0
SHORT_STEP_DEMO = DemoShape(
    spec=DatasetSpec(30 * STEP_SECONDS, 60 * STEP_SECONDS, step_seconds=STEP_SECONDS),
    history=dataclasses.replace(MINUTE_DEMO.history, n_gpus=100, n_steps=360, step_seconds=STEP_SECONDS),
    options=dataclasses.replace(MINUTE_DEMO.options, period_seconds=60 * STEP_SECONDS),
)
# simulate.head_start_seconds: the scripted ECC ramp (30 s in, over 100 s), XID storm (40 s) and NVLink
# bursts (60 s) are under way in the first samples; the GPU falling off the bus (170 s) stays out of the run
HEAD_START = 60.0
SCORE_INTERVAL = 1.0
DIAGNOSIS_INTERVAL = 1.0  # [diagnosis] interval_seconds: findings become incidents within a second


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model at 3 s steps, trained once for this module (seconds) with the demo's own training and
    save path (seed 0: its model id is the demo's), read only here."""
    return train_demo_model(tmp_path_factory.mktemp("short-step-demo") / "model", 0, SHORT_STEP_DEMO)


def _at_risk_findings(fleet: Fleet) -> int:
    with urllib.request.urlopen(fleet.url + "/v1/findings", timeout=10) as response:
        doc = json.loads(response.read())
    return sum(1 for f in doc["findings"] if f["kind"] == "at_risk_gpu")


def _watching_incidents(fleet: Fleet) -> int:
    """Open warning incidents on GPUs (what at-risk findings become), from the controller's read API."""
    with urllib.request.urlopen(fleet.url + "/v1/fleet", timeout=10) as response:
        doc = json.loads(response.read())
    return sum(
        1 for i in doc["worst_incidents"] if i["component_kind"] == "gpu" and i["severity"] == "warning"
    )


def test_a_controller_with_a_model_scores_its_agents_gpus(tmp_path: Path, model_dir: Path) -> None:
    fleet = Fleet(tmp_path, free_port())
    try:
        controller = fleet.start_controller(
            f'[predictor]\nmodel_dir = "{model_dir}"\nscore_interval_seconds = {SCORE_INTERVAL}\n'
            f"[diagnosis]\ninterval_seconds = {DIAGNOSIS_INTERVAL}\n"
        )
        agent = fleet.start_agent("gpu-a", seed=1, duration=600, simulate="1x8", head_start=HEAD_START)
        fleet.wait_for_hosts({"gpu-a"})
        # Rows are stored from now on; the step ending at the second boundary from now is the earliest second
        # complete step there can be, scored within a round (and a flush) of its end. Until then, and until
        # the model's selection rule has raised an at-risk warning, the agent keeps shipping.
        second_step = (math.floor(time.time() / STEP_SECONDS) + 2) * STEP_SECONDS
        deadline = second_step + 240  # a wait, not a target: a loaded machine scores slowly
        while time.time() < second_step + 2 * SCORE_INTERVAL + 1 or not _at_risk_findings(fleet):
            assert time.time() < deadline, "no at-risk warning raised"
            time.sleep(0.5)  # polling a real controller process: it offers no event to wait on
        agent.send_signal(signal.SIGTERM)
        done = summary(agent)
        time.sleep(2 * SCORE_INTERVAL)  # two more scoring rounds over the last rows
        while not _watching_incidents(fleet):  # and an incident round over their findings
            assert time.time() < deadline, "no at-risk finding became an incident"
            time.sleep(0.5)
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
        assert incidents and {str(r[0]) for r in incidents} <= {str(r[0]) for r in flagged}
        assert all(sev == "warning" and action == "watch" for _, sev, action in incidents)
        # Every at-risk finding the incident rounds had read when the controller stopped is an incident
        # (one raised by the last scoring round before the stop is read by the next start's first round).
        read = con.execute(
            "SELECT DISTINCT gpu_uuid FROM findings WHERE kind = 'at_risk_gpu' AND ingest_seq <= "
            "(SELECT floor FROM diagnosis_feed_marks WHERE table_name = 'findings')"
        ).fetchall()
        assert read and {str(r[0]) for r in read} <= {str(r[0]) for r in incidents}
    finally:
        con.close()


@pytest.mark.parametrize("what", ["missing", "uncalibrated"])
def test_a_model_that_cannot_score_live_is_one_log_line_and_no_task(
    tmp_path: Path, model_dir: Path, what: str, caplog: pytest.LogCaptureFixture
) -> None:
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
