"""Rank averaging over retrains, live (`[predictor] average_retrains`): each step ranked by the serving model
and the registry models that served before it, each GPU's within-step rank averaged as the backtest's
`xgboost_avg` does, then the saved selection rule; `risk` stays the serving model's own."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.predict.live import LiveScorer, averaged_ranking, complete_bucket_end
from fleetguard.predict.scoring_service import ScoringService
from fleetguard.predict.store_reader import gpu_feature_columns, register_store
from fleetguard.records.telemetry import GpuSample
from fleetguard.store import Store
from fleetguard.store import model_registry as reg
from predictor import artifact
from predictor.calibration import Calibration, CalibrationKind
from predictor.dataset import DatasetSpec, Instances, build_instances, fetch_instances
from predictor.models import XGBoostModel
from predictor.risk_policy import RiskPolicy
from predictor.selection import PeriodPicks, SelectionRule, StepSelector, pick_step, select_causal_k
from predictor.sliding_ensemble import RankHistory, mean_rank
from predictor.training import latest_per_device

HOUR = 3600.0
T0 = 472_222 * HOUR  # hour-aligned, near 2023-11
HOURS = 12
GPUS = 12
SPEC = DatasetSpec(6 * HOUR, 3 * 86400.0, step_seconds=HOUR)
RULE = SelectionRule(k=3, period_seconds=HOUR, step_seconds=HOUR)
NOW = T0 + HOURS * HOUR
COLUMNS = (
    "temperature_celsius",
    "power_watts",
    "ecc_corrected_aggregate",
    "remapped_rows_corrected",
    "pcie_replay_errors",
)


# ---- the property: live picks equal the backtest's on the same models' scores ----------------------------

_steps = st.lists(
    st.lists(
        st.tuples(st.integers(0, 7), st.lists(st.floats(0, 1), min_size=3, max_size=3), st.booleans()),
        min_size=0,
        max_size=8,
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(steps=_steps, k=st.integers(1, 4), steps_per_period=st.integers(1, 4), models=st.integers(1, 3))
def test_live_averaged_selection_equals_the_backtests(
    steps: list[list[tuple[int, list[float], bool]]], k: int, steps_per_period: int, models: int
) -> None:
    step = 60.0
    period_seconds = step * steps_per_period
    t0 = 1_700_000_040.0 // period_seconds * period_seconds
    ts_l, dev_l, score_l, ok_l = [], [], [], []
    for j, rows in enumerate(steps):
        seen = set()
        for d, s, ok in rows:
            if d in seen:
                continue  # one instance per device and step
            seen.add(d)
            ts_l.append(t0 + j * step)
            dev_l.append(f"gpu-{d}")
            score_l.append(s[:models])
            ok_l.append(ok)
    ts = np.asarray(ts_l, dtype=np.float64)
    dev = np.asarray(dev_l, dtype=object)
    # column m: model m's raw scores (0 = the serving model, then the ones that served before it)
    scores = np.asarray(score_l, dtype=np.float64).reshape(len(ts_l), models)
    eligible = np.asarray(ok_l, dtype=bool)
    # the backtest: every step's ranks averaged over the retrains' scores at once, then select_causal_k
    # (the backtest's history holds the oldest retrain first)
    averaged = mean_rank([scores[:, m] for m in reversed(range(models))], ts) if models > 1 else scores[:, 0]
    n_periods = math.ceil(len(steps) / steps_per_period)
    period = np.floor((ts - t0) / period_seconds + 1e-9).astype(np.int64)
    starts = t0 + period_seconds * np.arange(n_periods, dtype=np.float64)
    backtest = select_causal_k(period, ts, dev, averaged, k, starts, period_seconds, step, eligible)
    # live: one step at a time, the step's own scores only
    live = StepSelector(SelectionRule(k, period_seconds, step))
    picked: list[int] = []
    for t in sorted(set(ts_l)):
        at = np.flatnonzero(ts == t)
        ranking = averaged_ranking(scores[at, 0], [scores[at, m] for m in range(1, models)], t)
        np.testing.assert_array_equal(ranking, averaged[at])
        picked.extend(at[live.pick(t, dev[at], ranking, eligible[at])].tolist())
    assert sorted(picked) == backtest.tolist()


def test_one_model_ranks_by_its_own_scores() -> None:
    raw = np.array([0.2, 0.9, 0.5])
    np.testing.assert_array_equal(averaged_ranking(raw, [], 0.0), raw)


# ---- a real store, real saved models, the registry -------------------------------------------------------


def _samples() -> list[GpuSample]:
    rng = np.random.default_rng(3)
    out = []
    for h in range(HOURS):
        for g in range(GPUS):
            out.append(
                GpuSample(
                    ts=T0 + h * HOUR,
                    host=f"node{g // 4}",
                    gpu_index=g % 4,
                    uuid=f"GPU-{g}",
                    pci_bus_id=f"0000:0{g % 4}:00.0",
                    temperature_celsius=55.0 + 2.0 * g * h / HOURS + rng.normal(0, 1.0),
                    power_watts=300.0 + rng.normal(0, 20.0),
                    utilization_gpu_percent=90.0,
                    utilization_memory_percent=50.0,
                    ecc_corrected_aggregate=int(rng.integers(0, 50) * h),
                    ecc_uncorrected_aggregate=0,
                    remapped_rows_corrected=int(rng.integers(0, 3)),
                    pcie_replay_errors=int(rng.integers(0, 4)),
                    nvlink_crc_flit_errors=0,
                )
            )
    return out


def _instances(con: duckdb.DuckDBPyConnection, columns: tuple[str, ...]) -> Instances:
    cur = con.cursor()
    try:
        register_store(cur)
        names = build_instances(cur, columns, SPEC, (), table="fg_test")
        return fetch_instances(cur, names, table="fg_test")
    finally:
        cur.close()


def _save_model(directory: Path, model_id: str, inst: Instances, columns: tuple[str, ...], seed: int) -> None:
    """A small real XGBoost on the store's own features, each seed learning a different mix of them (as
    retrains on different windows would), saved with a calibration and a selection rule."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=inst.x.shape[1])
    z = np.nan_to_num(inst.x.astype(np.float64)) @ weights
    y = (z > np.quantile(z, 0.7)).astype(np.float64)
    model = XGBoostModel(n_estimators=8, max_depth=2, n_jobs=1)
    model.fit(inst.x, y, seed)
    policy = RiskPolicy(
        Calibration(CalibrationKind.PLATT, base_rate=0.05),
        RULE,
        tuple(float(v) for v in np.median(np.nan_to_num(inst.x), axis=0)),
    )
    artifact.save(
        directory,
        model,
        SPEC,
        columns,
        (),
        inst.feature_names,
        (T0, NOW),
        {},
        model_id=model_id,
        policy=policy,
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(store file, model_dir): the operator's model in model_dir, and m1, m2, m3 promoted in turn."""
    root = tmp_path_factory.mktemp("avg")
    path, model_dir = root / "fleet.duckdb", root / "model"
    with Store.open(path) as store:
        store.append(_samples())
    con = duckdb.connect(str(path))
    try:
        # a few of the store's columns: the feature SQL over all of them is most of a round's cost
        columns = tuple(c for c in COLUMNS if c in gpu_feature_columns())
        assert len(columns) == len(COLUMNS)
        inst = _instances(con, columns)
        _save_model(model_dir, "base", inst, columns, seed=10)
        # m1 was trained on fewer columns (a retrain's own choice): its features are built apart
        fewer = columns[:-2]
        for i, seed in enumerate((11, 12, 13), start=1):
            cols, rows = (fewer, _instances(con, fewer)) if i == 1 else (columns, inst)
            _save_model(model_dir / "models" / f"m{i}", f"m{i}", rows, cols, seed)
            reg.add_model(
                con, reg.ModelRecord(f"m{i}", T0 + i, T0, NOW, reg.ModelState.CANDIDATE, {}), "gate"
            )
            reg.promote(con, f"m{i}", "gate", T0 + 10 * i)
    finally:
        con.close()
    return path, model_dir


def _step(con: duckdb.DuckDBPyConnection, loaded: artifact.LoadedModel) -> Instances:
    """The features of the step live scoring scores at NOW: the store read over the feature window only."""
    end = complete_bucket_end(NOW, HOUR)
    cur = con.cursor()
    try:
        register_store(cur, since_ts=end - SPEC.window_steps * HOUR, until_ts=end)
        names = build_instances(cur, loaded.feature_columns, SPEC, (), table="fg_step")
        inst = latest_per_device(fetch_instances(cur, names, table="fg_step"))
    finally:
        cur.close()
    assert names == loaded.feature_names
    return inst.subset(inst.ts == end)


def test_the_scoring_service_serves_the_backtests_rank_average(fleet: tuple[Path, Path]) -> None:
    path, model_dir = fleet
    con = duckdb.connect(str(path))
    try:
        averaged = ScoringService(model_dir, average_retrains=3).round(con, NOW)
        alone = ScoringService(model_dir, average_retrains=1).round(con, NOW)
        models = [artifact.load(model_dir / "models" / f"m{i}") for i in (1, 2, 3)]
        inst = _step(con, models[-1])
    finally:
        con.close()
    # the backtest's way: the retrains' scorers in a RankHistory of depth 3, oldest pushed first
    history = RankHistory(3)
    assert len(models[0].feature_names) < len(inst.feature_names)
    for m in models:  # each retrain's columns of the instances, as predictor.backtest fits them
        cols = np.asarray([inst.feature_names.index(n) for n in m.feature_names], dtype=np.int64)
        history.push([(cols, m.model)])
    expected = history.average(inst.x, inst.ts)
    serving = models[-1]
    raw = serving.model.score(inst.x)
    risk = Calibration(CalibrationKind.PLATT, base_rate=0.05).apply(raw)
    picks = pick_step(
        RULE, PeriodPicks(), *RULE.place(float(inst.ts[0])), inst.device_id, expected, risk >= 0
    )
    assert [p.device_id for p in averaged.picked] == [str(inst.device_id[i]) for i in picks]
    order = np.lexsort((inst.device_id.astype(str), -raw, -expected))
    assert [p.device_id for p in averaged.predictions] == [str(d) for d in inst.device_id[order]]
    assert [p.rank for p in averaged.predictions] == list(range(1, GPUS + 1))
    # risk is the serving model's calibrated probability, averaged or not
    risk_of = {str(d): r for d, r in zip(inst.device_id, risk, strict=True)}
    for p in averaged.predictions:
        assert p.risk == pytest.approx(risk_of[p.device_id]) and p.model_id == "m3"
    # alone, the serving model's own ranking; the average picks differently on this fleet
    assert [p.device_id for p in alone.predictions] == [
        str(d) for d in inst.device_id[np.lexsort((inst.device_id.astype(str), -raw))]
    ]
    assert {p.device_id for p in alone.picked} != {p.device_id for p in averaged.picked}


def test_the_average_follows_the_registry(
    fleet: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, model_dir = fleet
    copy, copy_dir = tmp_path / "fleet.duckdb", tmp_path / "model"
    shutil.copy(path, copy)
    shutil.copytree(model_dir, copy_dir)
    con = duckdb.connect(str(copy))
    try:
        service = ScoringService(copy_dir, average_retrains=3)
        service.follow_registry(con)
        assert [p.model_id for p in service.scorer.previous] == ["m2", "m1"]
        # m1's files gone from the registry's view: the average goes on with what is left
        reg.mark_files_removed(con, "m1", NOW, "retrain gate")
        service.follow_registry(con)
        assert service.scorer.loaded.model_id == "m3"
        assert [p.model_id for p in service.scorer.previous] == ["m2"]
        # a rollback serves m2, and only what served before it is averaged with it
        reg.rollback(con, "alice", NOW + 1)
        service.follow_registry(con)
        assert service.scorer.loaded.model_id == "m2" and service.scorer.previous == ()
        # an earlier model whose files cannot load is one log line, not an outage
        reg.promote(con, "m3", "alice", NOW + 2)
        shutil.rmtree(copy_dir / "models" / "m2")
        (copy_dir / "models" / "m2").mkdir()
        with caplog.at_level(logging.WARNING):
            service.follow_registry(con)
            scored = service.round(con, NOW)
        assert service.scorer.loaded.model_id == "m3" and service.scorer.previous == ()
        assert "m2 is left out of the rank average" in caplog.text
        assert len(scored.predictions) == GPUS
    finally:
        con.close()


def test_the_operators_own_model_has_nothing_to_average_with(fleet: tuple[Path, Path]) -> None:
    _, model_dir = fleet
    scorer = LiveScorer(model_dir, previous=())
    assert scorer.previous == () and scorer.loaded.model_id == "base"


def test_an_earlier_model_of_another_step_is_left_out(fleet: tuple[Path, Path], tmp_path: Path) -> None:
    _, model_dir = fleet
    other = artifact.load(model_dir / "models" / "m1")
    shifted = artifact.LoadedModel(
        other.model,
        DatasetSpec(6 * HOUR, 3 * 86400.0, step_seconds=60.0),
        other.feature_columns,
        other.event_kinds,
        other.feature_names,
        other.meta,
        other.categories,
        other.policy,
    )
    scorer = LiveScorer(
        model_dir / "models" / "m3", previous=[artifact.load(model_dir / "models" / "m2"), shifted]
    )
    assert [p.model_id for p in scorer.previous] == ["m2"]


def test_the_controller_scores_with_the_configured_average(fleet: tuple[Path, Path], tmp_path: Path) -> None:
    import dataclasses

    from fleetguard.config import Config
    from fleetguard.controller.analysis import fleet_scoring

    path, model_dir = fleet
    copy = tmp_path / "fleet.duckdb"
    shutil.copy(path, copy)
    config = Config()
    config = dataclasses.replace(
        config,
        predictor=dataclasses.replace(config.predictor, model_dir=str(model_dir), average_retrains=3),
    )
    task = fleet_scoring(config)
    assert task is not None and task.service.average_retrains == 3
    con = duckdb.connect(str(copy))
    try:
        task(con, NOW)
        assert [p.model_id for p in task.service.scorer.previous] == ["m2", "m1"]
        stored = con.execute("SELECT device_id FROM predictions ORDER BY rank").fetchall()
        flagged = con.execute("SELECT gpu_uuid FROM findings WHERE kind = 'at_risk_gpu'").fetchall()
    finally:
        con.close()
    assert len(stored) == GPUS and len(flagged) == RULE.k
