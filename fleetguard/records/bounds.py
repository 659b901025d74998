"""Value ranges of the store's column types, and the checks every parser at the edge applies.

Every number that comes from outside the agent (a rank's report, a flight-recorder dump, a sysfs counter, a
kernel log line) is checked here against the column it will land in, when it is parsed. A value the column
cannot hold is then a counted problem or a 400 at the edge, never a batch the store refuses later.

Usage at an edge::

    from fleetguard.records.bounds import OutOfRange, check_int64, int64_or_none

    step = check_int64("step", payload["step"])   # raises OutOfRange naming "step" -> answer 400
    seq = int64_or_none(parsed_seq)                # None (NULL) where the column allows it -> count it

The SQL type names are the ones `fleetguard.store.schema` gives columns (`int` -> BIGINT, hardware counters
-> UBIGINT, `float` -> DOUBLE); `tests/store` checks that every numeric column has a range here.
"""

from __future__ import annotations

import math
from enum import StrEnum


class SqlType(StrEnum):
    """The numeric column types of the store, named as DuckDB names them."""

    INTEGER = "INTEGER"
    BIGINT = "BIGINT"
    UBIGINT = "UBIGINT"
    DOUBLE = "DOUBLE"


INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# Inclusive integer range of each integer column type.
INTEGER_RANGES: dict[SqlType, tuple[int, int]] = {
    SqlType.INTEGER: (INT32_MIN, INT32_MAX),
    SqlType.BIGINT: (INT64_MIN, INT64_MAX),
    SqlType.UBIGINT: (0, UINT64_MAX),
}

# int(text) refuses strings longer than this many digits (CPython's guard against quadratic conversion);
# any count we store has at most 20 digits, so a longer run of digits is out of range, not an error.
_MAX_DIGITS = 20


class OutOfRange(ValueError):
    """A value from outside that the column it lands in cannot hold. `str()` is one line naming the field."""

    # Not a frozen dataclass: contextlib and the interpreter assign __traceback__ on exceptions.
    def __init__(self, field: str, value: object, sql_type: SqlType) -> None:
        super().__init__(field, value, sql_type)
        self.field = field
        self.value = value
        self.sql_type = sql_type

    def __str__(self) -> str:
        shown = repr(self.value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return f"{self.field}: {shown} is not a valid {self.sql_type.value}{_range_text(self.sql_type)}"


def _range_text(sql_type: SqlType) -> str:
    bounds = INTEGER_RANGES.get(sql_type)
    if bounds is None:
        return " (a finite number)"
    return f" (an integer from {bounds[0]} to {bounds[1]})"


def fits(sql_type: SqlType, value: object) -> bool:
    """Whether `value` can be stored in a column of `sql_type` as it is (bool is not a number here)."""
    if isinstance(value, bool):
        return False
    if sql_type is SqlType.DOUBLE:
        return isinstance(value, int | float) and _finite(value)
    if not isinstance(value, int):
        return False
    low, high = INTEGER_RANGES[sql_type]
    return low <= value <= high


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def check(sql_type: SqlType, field: str, value: object) -> int | float:
    """`value` if a column of `sql_type` can hold it; otherwise `OutOfRange` naming `field`."""
    if not fits(sql_type, value):
        raise OutOfRange(field, value, sql_type)
    assert isinstance(value, int | float)
    return float(value) if sql_type is SqlType.DOUBLE else value


def check_int64(field: str, value: object) -> int:
    return int(check(SqlType.BIGINT, field, value))


def check_uint64(field: str, value: object) -> int:
    return int(check(SqlType.UBIGINT, field, value))


def check_finite(field: str, value: object) -> float:
    return float(check(SqlType.DOUBLE, field, value))


def int64_or_none(value: int | None) -> int | None:
    """`value`, or None (NULL) where a BIGINT column cannot hold it: for nullable columns."""
    return value if value is not None and fits(SqlType.BIGINT, value) else None


def uint64_or_none(value: int | None) -> int | None:
    return value if value is not None and fits(SqlType.UBIGINT, value) else None


def finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and fits(SqlType.DOUBLE, value) else None


def clamp_int64(value: int) -> int:
    """`value` moved into BIGINT's range: for counts that only need to say "very many"."""
    return max(INT64_MIN, min(INT64_MAX, value))


def parse_int(text: str, base: int = 10) -> int | None:
    """An integer from text, or None for text that is not one or has more digits than any column holds.

    Unlike `int(text)`, never raises on a 5,000-digit run (CPython refuses those with ValueError) and never
    spends time converting one."""
    digits = text.strip().lstrip("+-")
    if base == 16 and digits[:2].lower() == "0x":
        digits = digits[2:]
    if not digits or len(digits.lstrip("0")) > _MAX_DIGITS:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None
