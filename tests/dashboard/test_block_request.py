"""A grid's block request as the browser sends it (AG Grid's infinite row model): checked field by field,
and the rows it selects, filtered and sorted as AG Grid would in the browser."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.block_request import (
    MAX_BLOCK_ROWS,
    BlockRequest,
    ColumnFilter,
    ColumnType,
    NumberCondition,
    NumberOp,
    SortDirection,
    SortKey,
    TextCondition,
    TextOp,
    parse_block_request,
)
from dashboard.block_rows import block, select

COLUMNS = {"gpu": ColumnType.TEXT, "host": ColumnType.TEXT, "risk": ColumnType.NUMBER}
MAX_ROWS = 100_000


def _request(**fields: Any) -> dict[str, Any]:
    return {"startRow": 0, "endRow": 100, "sortModel": [], "filterModel": {}} | fields


def test_a_request_as_the_grid_sends_it_is_read_into_its_typed_parts() -> None:
    raw = _request(
        startRow=100,
        endRow=200,
        sortModel=[{"colId": "risk", "sort": "asc"}],
        filterModel={
            "risk": {"filterType": "number", "type": "greaterThan", "filter": 0.5},
            "host": {"filterType": "text", "type": "contains", "filter": "Node-7"},
        },
    )
    assert parse_block_request(raw, COLUMNS, MAX_ROWS) == BlockRequest(
        100,
        200,
        (SortKey("risk", SortDirection.ASC),),
        (
            ColumnFilter("host", TextCondition(TextOp.CONTAINS, "node-7")),
            ColumnFilter("risk", NumberCondition(NumberOp.GREATER_THAN, 0.5)),
        ),
    )


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "startRow=0",
        _request(startRow=-1),
        _request(startRow=10, endRow=10),
        _request(endRow=MAX_ROWS + 1),
        _request(startRow=0, endRow=MAX_BLOCK_ROWS + 1),
        _request(startRow=2**70, endRow=2**70 + 100),
        _request(startRow=True, endRow=100),
        _request(startRow=0.0),
        _request(sortModel=[{"colId": "explanations; DROP TABLE predictions", "sort": "asc"}]),
        _request(sortModel=[{"colId": "risk", "sort": "sideways"}]),
        _request(sortModel={"colId": "risk", "sort": "asc"}),
        _request(filterModel=[{"host": "a"}]),
        _request(filterModel={"nope": {"filterType": "text", "type": "contains", "filter": "a"}}),
        _request(filterModel={"host": {"filterType": "number", "type": "equals", "filter": 1}}),
        _request(filterModel={"host": {"filterType": "text", "type": "regex", "filter": ".*"}}),
        _request(filterModel={"host": {"filterType": "text", "type": "contains", "filter": 7}}),
        _request(filterModel={"host": {"filterType": "text", "type": "contains", "filter": "x" * 257}}),
        _request(filterModel={"risk": {"filterType": "number", "type": "equals", "filter": "0.5"}}),
        _request(filterModel={"risk": {"filterType": "number", "type": "equals", "filter": float("nan")}}),
        _request(filterModel={"risk": {"filterType": "number", "type": "equals", "filter": True}}),
        # AG Grid's own operators and joined conditions, which DataTable's filter row never writes.
        _request(
            filterModel={"risk": {"filterType": "number", "type": "inRange", "filter": 0, "filterTo": 1}}
        ),
        _request(filterModel={"host": {"filterType": "text", "type": "startsWith", "filter": "node"}}),
        _request(
            filterModel={
                "risk": {
                    "filterType": "number",
                    "operator": "OR",
                    "conditions": [{"filterType": "number", "type": "blank"}] * 2,
                }
            }
        ),
    ],
)
def test_a_request_the_grid_could_not_have_sent_is_refused(raw: object) -> None:
    assert parse_block_request(raw, COLUMNS, MAX_ROWS) is None


ROWS: list[dict[str, Any]] = [
    {"gpu": "GPU-a", "host": "node-1", "risk": 0.9},
    {"gpu": "GPU-b", "host": "node-2", "risk": 0.2},
    {"gpu": "GPU-c", "host": "NODE-1", "risk": 0.5},
    {"gpu": "GPU-d", "host": "node-3", "risk": None},
    {"gpu": "GPU-e", "host": "node-12", "risk": 0.2},
]


def _selected(raw: dict[str, Any]) -> list[str]:
    request = parse_block_request(raw, COLUMNS, MAX_ROWS)
    assert request is not None
    return [r["gpu"] for r in block(ROWS, select(ROWS, request), request)]


def test_sorting_by_a_number_puts_empty_cells_first_and_keeps_ties_in_the_rows_order() -> None:
    assert _selected(_request(sortModel=[{"colId": "risk", "sort": "asc"}])) == [
        "GPU-d",
        "GPU-b",
        "GPU-e",
        "GPU-c",
        "GPU-a",
    ]
    assert _selected(_request(sortModel=[{"colId": "risk", "sort": "desc"}]))[:2] == ["GPU-a", "GPU-c"]


def test_a_second_sort_key_orders_the_first_ones_ties() -> None:
    model = [{"colId": "risk", "sort": "asc"}, {"colId": "host", "sort": "desc"}]
    assert _selected(_request(sortModel=model))[1:3] == ["GPU-b", "GPU-e"]  # node-2 after node-12


def test_a_text_filter_ignores_case_and_a_number_filter_leaves_empty_cells_out() -> None:
    host = {"host": {"filterType": "text", "type": "equals", "filter": "node-1"}}
    assert _selected(_request(filterModel=host)) == ["GPU-a", "GPU-c"]
    low = {"risk": {"filterType": "number", "type": "lessThan", "filter": 0.6}}
    assert _selected(_request(filterModel=low)) == ["GPU-b", "GPU-c", "GPU-e"]


def test_a_blank_filter_keeps_only_empty_cells_and_filters_on_two_columns_both_hold() -> None:
    assert _selected(_request(filterModel={"risk": {"filterType": "number", "type": "blank"}})) == ["GPU-d"]
    both = {
        "host": {"filterType": "text", "type": "contains", "filter": "NODE-1"},
        "risk": {"filterType": "number", "type": "notEqual", "filter": 0.9},
    }
    assert _selected(_request(filterModel=both)) == ["GPU-c", "GPU-e"]


def test_a_block_is_the_asked_slice_of_the_selected_rows_and_past_their_end_is_empty() -> None:
    assert _selected(_request(startRow=1, endRow=3)) == ["GPU-b", "GPU-c"]
    assert _selected(_request(startRow=100, endRow=200)) == []
