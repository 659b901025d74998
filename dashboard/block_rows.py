"""The rows a table's block request selects (`dashboard.block_request`), filtered and sorted in Python as AG
Grid's own filters and sort would in the browser: text matched ignoring case, an empty cell (None or "")
first in an ascending sort."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from dashboard.block_request import (
    BlockRequest,
    ColumnFilter,
    NumberCondition,
    NumberOp,
    SortDirection,
    TextCondition,
    TextOp,
)

Row = Mapping[str, Any]

_COMPARE: Final[dict[NumberOp, Callable[[float, float], bool]]] = {
    NumberOp.EQUALS: operator.eq,
    NumberOp.NOT_EQUAL: operator.ne,
    NumberOp.LESS_THAN: operator.lt,
    NumberOp.LESS_THAN_OR_EQUAL: operator.le,
    NumberOp.GREATER_THAN: operator.gt,
    NumberOp.GREATER_THAN_OR_EQUAL: operator.ge,
}
_MATCH: Final[dict[TextOp, Callable[[str, str], bool]]] = {
    TextOp.CONTAINS: lambda cell, text: text in cell,
    TextOp.EQUALS: operator.eq,
    TextOp.NOT_EQUAL: operator.ne,
}


def select(rows: Sequence[Row], request: BlockRequest) -> list[int]:
    """The positions in `rows` of the rows that pass every filter, in the request's sort order (the rows'
    own order where the sort model leaves a tie, as AG Grid keeps it)."""
    kept = [i for i, row in enumerate(rows) if all(_passes(row, f) for f in request.filters)]
    for key in reversed(request.sort):  # a stable sort per key, the last key first
        values = {i: _sort_value(rows[i].get(key.column)) for i in kept}
        kept.sort(key=values.__getitem__, reverse=key.direction == SortDirection.DESC)
    return kept


def block(rows: Sequence[Row], order: Sequence[int], request: BlockRequest) -> list[dict[str, Any]]:
    """The rows of the block asked for, copies (the caller's rows are shared between requests)."""
    return [dict(rows[i]) for i in order[request.start : request.end]]


def _sort_value(value: Any) -> tuple[int, Any]:
    # Empty cells sort apart from the values, so a None is never compared with a number.
    if value is None or value == "":
        return (0, 0)
    return (1, value.lower() if isinstance(value, str) else value)


def _passes(row: Row, column_filter: ColumnFilter) -> bool:
    cell, condition = row.get(column_filter.column), column_filter.condition
    blank = cell is None or cell == ""
    if condition.op in (TextOp.BLANK, NumberOp.BLANK):
        return blank
    if isinstance(condition, TextCondition):
        return _match_text("" if cell is None else str(cell).lower(), condition)
    return not blank and isinstance(cell, int | float) and _match_number(float(cell), condition)


def _match_text(cell: str, condition: TextCondition) -> bool:
    return _MATCH[condition.op](cell, condition.text)


def _match_number(cell: float, condition: NumberCondition) -> bool:
    assert condition.value is not None  # parse_block_request leaves no operand out but for BLANK
    return _COMPARE[condition.op](cell, condition.value)
