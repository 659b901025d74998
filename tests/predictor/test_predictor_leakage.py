"""The backtest is causal: events and failures after a time T change no score or pick made up to T."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleetguard.predict.contract import register_inputs
from predictor.backtest import BacktestConfig, BacktestResult, run_backtest, summarise
from predictor.dataset import (
    DatasetSpec,
    build_instances,
    candidate_event_kinds,
    data_end_ts,
    fetch_events,
    fetch_failures,
    fetch_instances,
)
from predictor.selection import select_causal_k

if TYPE_CHECKING:
    from tests.predictor.conftest import History

DAY = 86400.0
PAST_SECONDS = 27 * DAY
FUTURE_SECONDS = 3 * DAY


def _between(samples: Path, start: float, end: float, out: Path) -> Path:
    """The samples from `start` to `end`, as one Parquet file."""
    con = duckdb.connect()
    try:
        kept = (
            f"SELECT * FROM read_parquet('{samples}/*.parquet') "
            f"WHERE ts >= {float(start)!r} AND ts <= {float(end)!r}"
        )
        con.execute(f"COPY ({kept}) TO '{out}' (FORMAT parquet)")
    finally:
        con.close()
    return out


def _events(
    path: Path, devices: list[str], start: float, end: float, kinds: list[str], n: int, seed: int
) -> Path:
    rng = np.random.default_rng(seed)
    pq.write_table(
        pa.table(
            {
                "device_id": rng.choice(devices, n),
                "ts": rng.uniform(start, end, n),
                "kind": rng.choice(kinds, n),
            }
        ),
        path,
    )
    return path


def _run(samples: Path, failures: Path, events: Path) -> BacktestResult:
    con = duckdb.connect()
    inputs = register_inputs(con, samples, failures, events)
    kinds = candidate_event_kinds(con)
    names = build_instances(con, inputs.feature_columns, DatasetSpec(), kinds)
    inst = fetch_instances(con, names)
    f_dev, f_ts = fetch_failures(con)
    config = BacktestConfig(
        train_window_seconds=14 * DAY,
        retrain_every_seconds=7 * DAY,
        n_jobs=1,
        models=("xgboost", "logistic", "cascade"),
        candidate_event_kinds=kinds,
        max_event_kinds=2,
    )
    return run_backtest(inst, f_dev, f_ts, data_end_ts(con), config, events=fetch_events(con, kinds))


def test_future_events_and_failures_change_no_earlier_score_or_pick(
    small_history: History, tmp_path: Path
) -> None:
    spec = small_history.spec
    devices = [f"gpu-{i:06d}" for i in range(spec.n_gpus)]
    cut = spec.start_ts + 40 * DAY  # T: a retrain happens before it, scored days follow on both sides
    # The samples run from PAST_SECONDS before T (the backtest's first retrain comes 20 days in: a retrain
    # a week before T, and scored days up to it) to FUTURE_SECONDS after it (a retrain and days of scores
    # that see the future: a flood of events from T on, failures from a day after). More on either side
    # would only repeat that: each retrain trains every model of both runs again.
    start, end = cut - PAST_SECONDS, cut + FUTURE_SECONDS
    samples = _between(small_history.samples, start, end, tmp_path / "samples.parquet")
    base = _events(tmp_path / "base.parquet", devices, start, end, ["xid_13", "xid_31", "xid_43"], 3000, 1)
    table = pq.read_table(base)
    # The future, made very different: a flood of a new kind and of a known one, and extra failures.
    extra = pq.read_table(_events(tmp_path / "x.parquet", devices, cut, end, ["xid_999", "xid_43"], 20000, 2))
    perturbed = tmp_path / "perturbed.parquet"
    pq.write_table(pa.concat_tables([table, extra]), perturbed)
    fails = pq.read_table(small_history.failures)
    rng = np.random.default_rng(3)
    more = pa.table(
        {
            "device_id": rng.choice(devices, 40),
            "ts": rng.uniform(cut + DAY, end, 40),
            "kind": ["xid_79"] * 40,
        }
    )
    fails_perturbed = tmp_path / "failures.parquet"
    pq.write_table(pa.concat_tables([fails, more.cast(fails.schema)]), fails_perturbed)

    a = _run(samples, small_history.failures, base)
    b = _run(samples, fails_perturbed, perturbed)
    assert a.retrains and any(r.at_ts < cut for r in a.retrains)
    early_a, early_b = a.scored.ts <= cut, b.scored.ts <= cut
    assert early_a.sum() == early_b.sum() > 0
    np.testing.assert_array_equal(a.scored.device_id[early_a], b.scored.device_id[early_b])
    for name, scores in a.scores.items():
        np.testing.assert_array_equal(scores[early_a], b.scores[name][early_b], err_msg=name)
    for r_a, r_b in zip(a.retrains, b.retrains, strict=False):
        if r_a.at_ts < cut:
            assert r_a.event_kinds == r_b.event_kinds and "xid_999" not in r_b.event_kinds
    for name in a.scores:
        assert _picks(a, name, cut) == _picks(b, name, cut), name
    assert summarise(a, 5).keys() == summarise(b, 5).keys()


def _picks(r: BacktestResult, name: str, cut: float) -> list[tuple[float, object]]:
    s = r.scored
    chosen = select_causal_k(
        s.period, s.ts, s.device_id, r.scores[name], 5, s.period_starts, s.period_seconds, DAY
    )
    return [(float(s.ts[i]), s.device_id[i]) for i in chosen if s.ts[i] <= cut]
