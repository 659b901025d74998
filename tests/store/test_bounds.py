"""Column ranges (fleetguard.records.bounds) agree with the store's schema and with what DuckDB accepts."""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetguard.records import bounds
from fleetguard.records.bounds import INTEGER_RANGES, OutOfRange, SqlType
from fleetguard.store import unstorable
from fleetguard.store.schema import TABLES


def test_every_numeric_column_type_of_the_schema_has_a_range() -> None:
    numeric = {c.sql_type for t in TABLES.values() for c in t.columns} - {"VARCHAR", "BOOLEAN", "TIMESTAMP"}
    assert numeric, "the schema has numeric columns"
    assert numeric <= {t.value for t in SqlType}


@pytest.mark.parametrize("sql_type", list(INTEGER_RANGES))
def test_integer_ranges_are_exactly_what_duckdb_accepts(sql_type: SqlType) -> None:
    low, high = INTEGER_RANGES[sql_type]
    con = duckdb.connect(":memory:")
    con.execute(f"CREATE TABLE t (v {sql_type.value})")
    con.execute("INSERT INTO t VALUES (?::HUGEINT), (?::HUGEINT)", [str(low), str(high)])
    for outside in (low - 1, high + 1):
        with pytest.raises(duckdb.Error):
            con.execute("INSERT INTO t VALUES (?::HUGEINT)", [str(outside)])
    assert bounds.fits(sql_type, low) and bounds.fits(sql_type, high)
    assert not bounds.fits(sql_type, low - 1) and not bounds.fits(sql_type, high + 1)


def test_check_int64_names_the_field_in_one_line() -> None:
    with pytest.raises(OutOfRange) as caught:
        bounds.check_int64("step", 10**20)
    message = str(caught.value)
    assert message.startswith("step: 100000000000000000000 is not a valid BIGINT")
    assert "\n" not in message
    assert caught.value.field == "step"


def test_a_huge_value_is_shortened_in_the_message() -> None:
    with pytest.raises(OutOfRange) as caught:
        bounds.check_uint64("value", 10**300)
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize("value", [True, "7", 1.0, None])
def test_integer_checks_refuse_values_that_are_not_ints(value: object) -> None:
    with pytest.raises(OutOfRange):
        bounds.check_int64("rank", value)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 10**400, "1.0"])
def test_check_finite_refuses_what_a_double_column_should_not_hold(value: object) -> None:
    with pytest.raises(OutOfRange):
        bounds.check_finite("duration_seconds", value)


def test_check_finite_takes_ints_as_floats() -> None:
    assert bounds.check_finite("duration_seconds", 3) == 3.0


def test_nullable_variants_turn_out_of_range_into_none() -> None:
    assert bounds.int64_or_none(10**30) is None
    assert bounds.int64_or_none(-5) == -5
    assert bounds.uint64_or_none(-1) is None
    assert bounds.uint64_or_none(2**64 - 1) == 2**64 - 1
    assert bounds.finite_or_none(math.nan) is None
    assert bounds.int64_or_none(None) is None


def test_clamp_int64() -> None:
    assert bounds.clamp_int64(2**70) == bounds.INT64_MAX
    assert bounds.clamp_int64(-(2**70)) == bounds.INT64_MIN
    assert bounds.clamp_int64(12) == 12


def test_parse_int_never_raises_on_long_digit_runs() -> None:
    assert bounds.parse_int("9" * 5000) is None
    assert bounds.parse_int("000000000000000000000000042") == 42
    assert bounds.parse_int("18446744073709551615") == 2**64 - 1
    assert bounds.parse_int("0x1f", 16) == 31
    assert bounds.parse_int("abc") is None
    assert bounds.parse_int("") is None


@given(st.integers())
def test_fits_agrees_with_the_range(value: int) -> None:
    for sql_type, (low, high) in INTEGER_RANGES.items():
        assert bounds.fits(sql_type, value) == (low <= value <= high)


@given(st.text(max_size=60))
def test_parse_int_agrees_with_int_for_short_text(text: str) -> None:
    try:
        expected: int | None = int(text)
    except ValueError:
        expected = None
    parsed = bounds.parse_int(text)
    assert parsed is None or parsed == expected
    if expected is not None and abs(expected) < 10**20:
        assert parsed == expected


_column_values = st.lists(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([2**63 - 1, -(2**63), 2**64 - 1, 9.2e12, -9.2e12, 9.3e12, "x"]),
    ),
    max_size=12,
)


@given(values=_column_values, sql_type=st.sampled_from([SqlType.BIGINT, SqlType.UBIGINT]))
def test_the_quick_integer_check_passes_only_what_the_full_one_finds_nothing_in(
    values: list[object], sql_type: SqlType
) -> None:
    """integers_ok (min and max in C, the store's usual path) never passes a column where bad_integers
    would name a value, and passes every column of plain ints within range."""
    column = next(c for t in TABLES.values() for c in t.columns if c.sql_type == sql_type.value)
    if unstorable.integers_ok(sql_type, values):
        assert unstorable.bad_integers(column, sql_type, values) == {}
    low, high = INTEGER_RANGES[sql_type]
    if all(type(v) is int and low <= v <= high for v in values):  # type: ignore[operator]
        assert unstorable.integers_ok(sql_type, values)


@given(values=_column_values)
def test_the_quick_timestamp_check_passes_only_what_the_full_one_finds_nothing_in(
    values: list[object],
) -> None:
    column = next(c for t in TABLES.values() for c in t.columns if c.is_timestamp)
    if unstorable.timestamps_ok(values):
        assert unstorable.bad_timestamps(column, values) == {}
    if all(type(v) is float and math.isfinite(v) and abs(v) <= 9e12 for v in values):  # type: ignore[arg-type]
        assert unstorable.timestamps_ok(values)
