"""Explanations give each driving feature's value with its fleet percentile."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from predictor.explain import drivers_vs_reference, fleet_percentiles

values = st.one_of(st.floats(-1e6, 1e6, width=32), st.just(float("nan")))


@given(fleet=arrays(np.float32, st.tuples(st.integers(1, 40), st.just(3)), elements=values))
@settings(max_examples=200, deadline=None)
def test_percentiles_lie_in_0_100_and_grow_with_the_value(fleet: np.ndarray) -> None:
    pct = fleet_percentiles(fleet, fleet)
    present = ~np.isnan(fleet)
    assert np.array_equal(np.isnan(pct), ~present | ~present.any(axis=0)[None, :])
    assert np.all((pct[present] > 0) & (pct[present] <= 100))
    for j in range(fleet.shape[1]):
        col, p = fleet[present[:, j], j], pct[present[:, j], j]
        order = np.argsort(col, kind="stable")
        assert np.all(np.diff(p[order]) >= 0)  # a higher value never sits lower in the fleet
        if len(col):
            assert p[np.argmax(col)] == 100.0  # the fleet's highest value is at p100


def test_percentile_counts_the_devices_at_or_below() -> None:
    fleet = np.array([[0.0], [0.0], [0.0], [5.0], [9.0]], dtype=np.float32)
    rows = np.array([[0.0], [5.0], [7.0], [np.nan]], dtype=np.float32)
    np.testing.assert_allclose(fleet_percentiles(fleet, rows)[:, 0], [60.0, 80.0, 80.0, np.nan])


def test_drivers_carry_value_and_fleet_percentile() -> None:
    # risk rises with feature 0 only; feature 1 is noise the model ignores
    def risk_of(x: np.ndarray) -> np.ndarray:
        return np.asarray(1.0 / (1.0 + np.exp(-(x[:, 0] - 5.0))), dtype=np.float64)

    fleet = np.array([[float(v), 1.0] for v in range(10)], dtype=np.float32)
    (why,) = drivers_vs_reference(risk_of, fleet[[9]], (0.0, 1.0), ("ecc", "temp"), fleet=fleet)
    assert [d.feature for d in why] == ["ecc"]  # temp at its reference contributes nothing
    assert why[0].value == 9.0 and why[0].percentile == 100.0
    assert why[0].as_dict()["percentile"] == 100.0
    # without the fleet, no percentile is claimed
    (bare,) = drivers_vs_reference(risk_of, fleet[[9]], (0.0, 1.0), ("ecc", "temp"))
    assert bare[0].percentile is None and "percentile" not in bare[0].as_dict()
