"""Retraining on a controller's own store: a real controller (real DuckDB file, real HTTP on loopback) whose
maintenance starts the bounded retrain child on schedule; the gate decides; the registry keeps both models'
figures; an operator promotes and rolls back through the API and on the store file; scoring follows the
active model without a restart; and a child that reaches its memory limit dies while ingest goes on."""

from __future__ import annotations

import json
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from fleetguard.config import load_config
from fleetguard.controller.process import start_controller
from fleetguard.predict.model_cli import model_group
from fleetguard.predict.store_reader import register_store
from predictor.dataset import DatasetSpec
from predictor.gate import GateFigures, Picks, decide
from predictor.registry import ALL_MODELS
from predictor.training import PolicyOptions, save_trained, train_from_views
from tests.controller.helpers import Controller, batch, start_test_controller
from tests.controller.history_store import write_history_store

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

DAY = 86400.0
SPEC = DatasetSpec(6 * 3600.0, 3 * DAY, step_seconds=3600.0)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store with 20 days of a 60-GPU fleet's history ending now, and the operator's model in model_dir,
    trained with `train --store`'s code on the history up to 8 days ago (a model that has aged)."""
    root = tmp_path_factory.mktemp("history")
    store = root / "fleet.duckdb"
    now = time.time()
    write_history_store(store, now)
    con = duckdb.connect(str(store), read_only=True)
    try:
        inputs = register_store(con)
        trained = train_from_views(
            con,
            inputs.feature_columns,
            "xgboost",
            SPEC,
            now - 8 * DAY,
            5 * DAY,
            n_jobs=1,
            options=PolicyOptions(period_seconds=3600.0, k=3),
        )
    finally:
        con.close()
    model_dir = root / "models"
    save_trained(model_dir, trained, SPEC, inputs.feature_columns, model_id="seed")
    return store, model_dir


def _controller(tmp_path: Path, seeded: tuple[Path, Path], **predictor: Any) -> tuple[Controller, Path]:
    store, model_dir = seeded
    shutil.copy(store, tmp_path / "controller.duckdb")
    own_models = tmp_path / "models"
    shutil.copytree(model_dir, own_models)
    extra = {
        "predictor.model_dir": str(own_models),
        "predictor.score_interval_seconds": 1.0,
        "predictor.retrain_every_seconds": 1.0,
        "predictor.train_window_seconds": 7 * DAY,
        "predictor.evaluate_window_seconds": 4 * DAY,
        **{f"predictor.{k}": v for k, v in predictor.items()},
    }
    return start_test_controller(tmp_path, extra=extra), own_models


def _wait(what: str, seconds: float, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)  # polling a real controller and its retrain child: no event to wait on
    raise AssertionError(f"no {what} within {seconds:.0f} s")


def _token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / "operator.token"
    path.write_text(token)
    path.chmod(0o600)
    return path


def _models_served(store: Controller) -> set[str]:
    cur = store.running.store.cursor()
    try:
        return {str(r[0]) for r in cur.execute("SELECT DISTINCT model_id FROM predictions").fetchall()}
    finally:
        cur.close()


def test_a_scheduled_retrain_is_gated_recorded_and_operated(
    tmp_path: Path, seeded: tuple[Path, Path]
) -> None:
    controller, model_dir = _controller(tmp_path, seeded)
    operator = controller.tokens["operator"]
    try:
        listing = _wait(
            "retrained model",
            600,
            lambda: controller.get("/v1/models").doc["models"],
        )
        (model,) = listing
        figures = model["figures"]
        # the gate's figures: both models on the same out-of-time period, at equal volume
        assert figures["current_model_id"] == "seed"
        assert figures["candidate"]["predictions"] == figures["current"]["predictions"] > 0
        assert figures["positives"] > 0 and figures["k"] == 3
        assert figures["end_ts"] - figures["start_ts"] <= 4 * DAY
        verdict, reason = decide(
            GateFigures(
                figures["start_ts"],
                figures["end_ts"],
                figures["k"],
                figures["period_seconds"],
                figures["instances"],
                figures["positives"],
                Picks(figures["candidate"]["predictions"], figures["candidate"]["hits"]),
                Picks(figures["current"]["predictions"], figures["current"]["hits"]),
            )
        )
        assert figures["verdict"] == verdict.value and figures["reason"] == reason
        assert model["state"] == ("active" if verdict.value == "promote" else "rejected")
        # trained on instances (and labels known) before the evaluation period began
        assert model["train_window"][1] < figures["start_ts"]
        files = model_dir / "models" / model["model_id"]
        assert stat.S_IMODE(files.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files.rglob("*") if p.is_file())
        assert not (model_dir / "retrain").exists() or not any((model_dir / "retrain").iterdir())
        model_id = model["model_id"]
        # the operator's part on a controller that retrains no more, so no later retrain moves the model
        controller.running.stop()
        overrides = {**controller.config_overrides, "predictor.retrain_every_seconds": 0.0}
        controller = Controller(
            start_controller(load_config(overrides=overrides)), controller.tokens, overrides
        )

        # operator actions need an operator token, and are audited with where they came from
        assert controller.post("/v1/models/rollback", b"{}", None, "identity").status == 401
        assert (
            controller.post("/v1/models/rollback", b"{}", controller.tokens["node-a"], "identity").status
            == 403
        )
        if model["state"] == "active":
            done = controller.post("/v1/models/rollback", b"{}", operator, "identity")
            assert done.status == 200 and done.doc["active"] == "(model_dir)"
        body = json.dumps({"model_id": model_id}).encode()
        done = controller.post("/v1/models/promote", body, operator, "identity")
        assert done.status == 200 and done.doc["active"] == model_id
        shown = controller.get(f"/v1/models/{model_id}").doc
        assert shown["state"] == "active"
        assert any(
            e["action"] == "promoted" and e["actor"].startswith("operator token via API from 127.0.0.1")
            for e in shown["log"]
        )
        # scoring serves the promoted model from the next round, without a restart
        _wait("predictions by the promoted model", 120, lambda: model_id in _models_served(controller))

        # the CLI against the running controller
        token_file = _token_file(tmp_path, operator)
        runner = CliRunner()
        listed = runner.invoke(model_group, ["list", "--url", controller.url, "--json"])
        assert listed.exit_code == 0, listed.output
        assert f'"active": "{model_id}"' in listed.output
        rolled = runner.invoke(
            model_group, ["rollback", "--url", controller.url, "--token-file", str(token_file)]
        )
        assert rolled.exit_code == 0 and "(model_dir)" in rolled.output, rolled.output
        refused = runner.invoke(model_group, ["promote", model_id, "--url", controller.url])
        assert refused.exit_code != 0 and "401" in refused.output
    finally:
        controller.running.stop()

    # the CLI on the store file once nothing runs
    store = ["--store", str(tmp_path / "controller.duckdb")]
    runner = CliRunner()
    table = runner.invoke(model_group, ["list", *store])
    assert table.exit_code == 0 and model_id in table.output and "serving: (model_dir)" in table.output
    promoted = runner.invoke(model_group, ["promote", model_id, *store])
    assert promoted.exit_code == 0, promoted.output
    shown_json = runner.invoke(model_group, ["show", model_id, *store, "--json"])
    assert '"state": "active"' in shown_json.output and "fleetguard model, on the store" in shown_json.output


def test_a_retrain_child_at_its_memory_limit_dies_while_ingest_goes_on(
    tmp_path: Path, seeded: tuple[Path, Path]
) -> None:
    # 800 MB of address space: enough for Python, the model and DuckDB to start, not for the features
    controller, model_dir = _controller(tmp_path, seeded, retrain_max_memory_mb=800)
    latencies: list[float] = []
    statuses: set[int] = set()
    try:

        def failed() -> list[dict[str, Any]]:
            started = time.monotonic()
            reply = controller.ship(batch("node-a", len(latencies) + 1))
            latencies.append(time.monotonic() - started)
            statuses.add(reply.status)
            log = controller.get("/v1/models").doc["log"]
            return [e for e in log if e["action"] == "retrain-failed"]

        (entry,) = _wait("failed retrain", 300, failed)
        for _ in range(5):  # and after it
            failed()
        doc = controller.get("/v1/models").doc
    finally:
        controller.running.stop()
    assert "stopped at its memory limit of 800 MB" in entry["detail"]
    assert doc["active"] == "(model_dir)" and doc["models"] == []  # the serving model stays
    assert statuses == {200} and len(latencies) >= 6
    assert max(latencies) < 10.0, latencies  # ingest never waited for the retrain
    assert not list((model_dir / "models").glob(".*partial"))


def test_the_config_lists_the_models_a_retrain_can_fit() -> None:
    from fleetguard.config import RETRAIN_MODELS

    assert set(RETRAIN_MODELS) == set(ALL_MODELS)


def test_a_retrain_past_its_wall_clock_limit_is_killed_and_the_serving_model_stays(
    tmp_path: Path, seeded: tuple[Path, Path]
) -> None:
    controller, model_dir = _controller(tmp_path, seeded, retrain_timeout_seconds=1.0)
    try:
        entries = _wait(
            "killed retrain",
            120,
            lambda: [e for e in controller.get("/v1/models").doc["log"] if e["action"] == "retrain-failed"],
        )
        doc = controller.get("/v1/models").doc
    finally:
        controller.running.stop()
    assert "killed at the wall-clock limit of 1 s" in entries[0]["detail"]
    assert doc["active"] == "(model_dir)" and doc["models"] == []
    assert not list((model_dir / "models").glob(".*partial"))
