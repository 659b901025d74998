"""Dataset builder: window features from the past only, horizon labels, censoring, repeated failures."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetguard.predict.contract import register_inputs
from predictor import dataset
from predictor.dataset import (
    DatasetSpec,
    Instances,
    build_instances,
    candidate_categories,
    fetch_instances,
)

if TYPE_CHECKING:
    from tests.predictor.conftest import History

DAY = 86400.0
Writer = Callable[[Path, dict[str, list[object]]], Path]


def _instances(samples: Path, failures: Path | None, spec: DatasetSpec) -> Instances:
    con = duckdb.connect()
    inputs = register_inputs(con, samples, failures)
    categories = candidate_categories(con, inputs.categorical_columns)
    names = build_instances(con, inputs.feature_columns, spec, categories=categories)
    return fetch_instances(con, names)


def _perturb_after(src: Path, dst: Path, cutoff_ts: float) -> Path:
    """Copy of the samples with every numeric value at or after `cutoff_ts` replaced by noise."""
    dst.mkdir()
    rng = np.random.default_rng(0)
    for part in sorted(src.glob("*.parquet")):
        table = pq.read_table(part)
        late = table.column("ts").to_numpy() >= cutoff_ts
        cols = {}
        for name in table.column_names:
            values = table.column(name).to_numpy()
            if name not in ("device_id", "ts") and values.dtype.kind in "OUS":
                values = np.where(late, "unseen-after-the-cutoff", values)  # a category first seen later
            elif name not in ("device_id", "ts"):
                values = np.where(late, rng.normal(1e4, 1e3, len(values)), values)
            cols[name] = values
        pq.write_table(pa.table(cols), dst / part.name)
    return dst


def _features_at_or_before(inst: Instances, cutoff_ts: float) -> dict[tuple[str, float], np.ndarray]:
    keep = inst.ts <= cutoff_ts
    return {(d, t): x for d, t, x in zip(inst.device_id[keep], inst.ts[keep], inst.x[keep], strict=True)}


def _leaks(history: History, tmp_path: Path) -> bool:
    spec = DatasetSpec()
    cutoff = history.spec.start_ts + 30 * DAY
    base = _instances(history.samples, history.failures, spec)
    noisy = _perturb_after(history.samples, tmp_path / "noisy", cutoff)
    later = _instances(noisy, history.failures, spec)
    # A category first seen after the cutoff adds or removes a 0/1 column that is zero up to the cutoff;
    # compare the columns both builds have, and check the others are zero.
    common = [n for n in base.feature_names if n in later.feature_names]
    assert len(common) > 50
    peeks = False
    for inst in (base, later):
        others = [j for j, n in enumerate(inst.feature_names) if n not in common]
        peeks |= bool(inst.x[np.ix_(inst.ts <= cutoff, np.array(others, dtype=np.intp))].any())
        inst.x = inst.x[:, [inst.feature_names.index(n) for n in common]]
    before = _features_at_or_before(base, cutoff)
    after = _features_at_or_before(later, cutoff)
    assert before.keys() == after.keys() and len(before) > 1000
    return peeks or any(not np.array_equal(before[k], after[k], equal_nan=True) for k in before)


def test_features_at_time_t_do_not_change_when_data_after_t_changes(
    small_history: History, tmp_path: Path
) -> None:
    assert not _leaks(small_history, tmp_path)


def test_the_leakage_check_catches_a_feature_that_peeks_at_the_future(
    small_history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def peeking(window_steps: int) -> str:
        return f"PARTITION BY device_id ORDER BY b RANGE BETWEEN {window_steps - 1} PRECEDING AND 1 FOLLOWING"

    monkeypatch.setattr(dataset, "_window_clause", peeking)
    assert _leaks(small_history, tmp_path)


def _toy(tmp_path: Path, writer: Writer, fail_days: list[float], n_days: int = 20) -> Instances:
    days = list(range(n_days))
    samples = writer(
        tmp_path / "s.parquet",
        {"device_id": ["a"] * n_days, "ts": [d * DAY + 3600 for d in days], "temp": [float(d) for d in days]},
    )
    failures = writer(
        tmp_path / "f.parquet", {"device_id": ["a"] * len(fail_days), "ts": [d * DAY for d in fail_days]}
    )
    return _instances(samples, failures, DatasetSpec(window_seconds=3 * DAY, horizon_seconds=2 * DAY))


def test_window_statistics_cover_the_last_w_steps(tmp_path: Path, table_writer: Writer) -> None:
    inst = _toy(tmp_path, table_writer, [15.0])
    row = inst.x[inst.ts == 5 * DAY][0]
    feat = dict(zip(inst.feature_names, row, strict=True))
    # Instance at the end of day 4 sees days 2, 3, 4.
    assert feat["temp__mean"] == pytest.approx(3.0)
    assert (feat["temp__min"], feat["temp__max"], feat["temp__last"]) == (2.0, 4.0, 4.0)
    assert feat["temp__delta"] == pytest.approx(2.0)
    assert feat["temp__slope"] == pytest.approx(1.0)
    assert feat["temp__std"] == pytest.approx(np.std([2.0, 3.0, 4.0]))
    # growth reaches back past the window, to the device's first sample (day 0), and never forward
    assert feat["temp__growth"] == pytest.approx(4.0)


def test_label_is_one_within_the_horizon_before_a_failure(tmp_path: Path, table_writer: Writer) -> None:
    inst = _toy(tmp_path, table_writer, [10.0])
    label = dict(zip(inst.ts / DAY, inst.label, strict=True))
    # Horizon 2 days: the failure at day 10 lies in [t, t + 2d) for t = 9d and 10d only.
    assert (label[9.0], label[10.0]) == (1.0, 1.0)
    assert label[8.0] == 0.0 and label[11.0] == 0.0


def test_a_device_failing_twice_is_labelled_against_its_next_failure(
    tmp_path: Path, table_writer: Writer
) -> None:
    inst = _toy(tmp_path, table_writer, [5.0, 14.0])
    label = dict(zip(inst.ts / DAY, inst.label, strict=True))
    nxt = dict(zip(inst.ts / DAY, inst.next_failure_ts / DAY, strict=True))
    assert label[5.0] == 1.0 and nxt[5.0] == 5.0
    assert label[6.0] == 0.0 and nxt[6.0] == 14.0
    assert label[13.0] == 1.0 and nxt[13.0] == 14.0


def test_records_of_one_incident_seconds_apart_are_one_failure(tmp_path: Path, table_writer: Writer) -> None:
    five_seconds = 5.0 / DAY  # e.g. XID 79, then "fallen off the bus"
    inst = _toy(tmp_path, table_writer, [10.0, 10.0 + five_seconds, 14.0])
    con = duckdb.connect()
    register_inputs(con, tmp_path / "s.parquet", tmp_path / "f.parquet")
    _, failure_ts = dataset.fetch_failures(con)
    assert list(failure_ts / DAY) == [10.0, 14.0]  # recall counts the incident once
    feat = {
        t / DAY: dict(zip(inst.feature_names, x, strict=True)) for t, x in zip(inst.ts, inst.x, strict=True)
    }
    assert feat[11.0]["failures__count"] == 1.0


def test_instances_whose_future_is_unknown_stay_unlabelled(tmp_path: Path, table_writer: Writer) -> None:
    inst = _toy(tmp_path, table_writer, [5.0])
    label = dict(zip(inst.ts / DAY, inst.label, strict=True))
    # Data ends in day 19 (last sample at 19d + 1h): a 2-day horizon from day 18 or later is not yet known.
    assert label[17.0] == 0.0
    assert np.isnan(label[18.0]) and np.isnan(label[20.0])


def test_past_failures_become_features_not_future_ones(tmp_path: Path, table_writer: Writer) -> None:
    inst = _toy(tmp_path, table_writer, [5.0])
    feat = {
        t / DAY: dict(zip(inst.feature_names, x, strict=True)) for t, x in zip(inst.ts, inst.x, strict=True)
    }
    assert feat[5.0]["failures__count"] == 0.0
    assert feat[6.0]["failures__count"] == 1.0
    assert feat[6.0]["hours_since_last_failure"] == pytest.approx(24.0)
