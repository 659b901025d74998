"""A table's request for a block of rows, read from what the browser sent, in the shape AG Grid's block
request has (start and end rows, a sort model, a filter model); `dashboard.table_query` writes a served
DataTable's page, sort and filter in it, so only what DataTable's filter row can say is read: one
condition per column, with its operators.

Everything in it comes from the browser. It is checked field by field against the table's own columns and
limits and becomes a typed `BlockRequest`, or None when anything is out of place (a forged request is
answered with no rows, never an error). Nothing in it ever becomes SQL: the rows are sorted and filtered
in Python (`dashboard.block_rows`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

# A block is a page of rows (20 on the predictions page); a few hundred is still one.
MAX_BLOCK_ROWS: Final = 1000
MAX_FILTER_CHARS: Final = 256


class ColumnType(enum.Enum):
    TEXT = "text"
    NUMBER = "number"


class SortDirection(enum.StrEnum):
    ASC = "asc"
    DESC = "desc"


class TextOp(enum.StrEnum):
    CONTAINS = "contains"
    EQUALS = "equals"
    NOT_EQUAL = "notEqual"
    BLANK = "blank"


class NumberOp(enum.StrEnum):
    EQUALS = "equals"
    NOT_EQUAL = "notEqual"
    LESS_THAN = "lessThan"
    LESS_THAN_OR_EQUAL = "lessThanOrEqual"
    GREATER_THAN = "greaterThan"
    GREATER_THAN_OR_EQUAL = "greaterThanOrEqual"
    BLANK = "blank"


@dataclass(frozen=True, slots=True)
class SortKey:
    column: str
    direction: SortDirection


@dataclass(frozen=True, slots=True)
class TextCondition:
    op: TextOp
    text: str  # lower case: AG Grid's text filter ignores case


@dataclass(frozen=True, slots=True)
class NumberCondition:
    op: NumberOp
    value: float | None  # None for BLANK, the one operator without an operand


Condition = TextCondition | NumberCondition


@dataclass(frozen=True, slots=True)
class ColumnFilter:
    column: str
    condition: Condition


@dataclass(frozen=True, slots=True)
class BlockRequest:
    start: int
    end: int  # exclusive
    sort: tuple[SortKey, ...] = ()
    filters: tuple[ColumnFilter, ...] = ()

    def view_key(self) -> tuple[tuple[SortKey, ...], tuple[ColumnFilter, ...]]:
        """What selects and orders the rows, whatever block of them is asked for."""
        return self.sort, self.filters


def parse_block_request(raw: object, columns: Mapping[str, ColumnType], max_rows: int) -> BlockRequest | None:
    """The request, or None when any field is missing, of the wrong type, out of bounds or names a column
    the table does not have."""
    if not isinstance(raw, dict):
        return None
    start, end = raw.get("startRow"), raw.get("endRow")
    if not _is_int(start) or not _is_int(end):
        return None
    assert isinstance(start, int) and isinstance(end, int)
    if not 0 <= start < end <= max_rows or end - start > MAX_BLOCK_ROWS:
        return None
    sort = _sort_model(raw.get("sortModel", []), columns)
    filters = _filter_model(raw.get("filterModel", {}), columns)
    if sort is None or filters is None:
        return None
    return BlockRequest(start, end, sort, filters)


E = TypeVar("E", bound=enum.Enum)


def _member(kind: type[E], value: object) -> E | None:
    """The member of `kind` whose value is `value`, or None (whatever the browser sent)."""
    if not isinstance(value, str):
        return None
    try:
        return kind(value)
    except ValueError:
        return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sort_model(raw: object, columns: Mapping[str, ColumnType]) -> tuple[SortKey, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > len(columns):
        return None
    keys = []
    for item in raw:
        if not isinstance(item, dict) or item.get("colId") not in columns:
            return None
        direction = _member(SortDirection, item.get("sort"))
        if direction is None:
            return None
        keys.append(SortKey(str(item["colId"]), direction))
    return tuple(keys)


def _filter_model(raw: object, columns: Mapping[str, ColumnType]) -> tuple[ColumnFilter, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        return None
    filters = []
    for column, model in raw.items():
        kind = columns.get(column) if isinstance(column, str) else None
        parsed = None if kind is None else _column_filter(column, kind, model)
        if parsed is None:
            return None
        filters.append(parsed)
    return tuple(sorted(filters, key=lambda f: f.column))  # one view per filter, in whatever order sent


def _column_filter(column: str, kind: ColumnType, model: object) -> ColumnFilter | None:
    if not isinstance(model, dict) or model.get("filterType") != kind.value:
        return None
    condition = _text(model) if kind == ColumnType.TEXT else _number(model)
    return None if condition is None else ColumnFilter(column, condition)


def _text(model: dict[str, object]) -> TextCondition | None:
    op = _member(TextOp, model.get("type"))
    if op is None:
        return None
    if op == TextOp.BLANK:
        return TextCondition(op, "")
    text = model.get("filter")
    if not isinstance(text, str) or len(text) > MAX_FILTER_CHARS:
        return None
    return TextCondition(op, text.lower())


def _number(model: dict[str, object]) -> NumberCondition | None:
    op = _member(NumberOp, model.get("type"))
    if op is None:
        return None
    if op == NumberOp.BLANK:
        return NumberCondition(op, None)
    value = _finite(model.get("filter"))
    return None if value is None else NumberCondition(op, value)


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
