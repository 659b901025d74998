"""A served DataTable's page, sort and filter (`page_current`, `sort_by`, `filter_query` as its filter row
writes them) read into the block request the server answers, and anything else refused."""

from __future__ import annotations

import pytest

from dashboard.block_request import (
    BlockRequest,
    ColumnFilter,
    ColumnType,
    NumberCondition,
    NumberOp,
    SortDirection,
    SortKey,
    TextCondition,
    TextOp,
)
from dashboard.table_query import table_request

COLUMNS = {
    "gpu": ColumnType.TEXT,
    "host": ColumnType.TEXT,
    "risk": ColumnType.NUMBER,
    "base rate": ColumnType.NUMBER,
}
MAX_ROWS = 16_384


def test_the_filter_rows_query_and_sort_are_read_into_the_page_they_ask_for() -> None:
    query = '{host} icontains NODE-07 && {risk} i> 0.5 && {gpu} icontains "GPU 1" && {base rate} is blank'
    sort_by = [{"column_id": "risk", "direction": "desc"}]
    assert table_request(2, 20, sort_by, query, COLUMNS, MAX_ROWS) == BlockRequest(
        40,
        60,
        (SortKey("risk", SortDirection.DESC),),
        (
            ColumnFilter("base rate", NumberCondition(NumberOp.BLANK, None)),
            ColumnFilter("gpu", TextCondition(TextOp.CONTAINS, "gpu 1")),
            ColumnFilter("host", TextCondition(TextOp.CONTAINS, "node-07")),
            ColumnFilter("risk", NumberCondition(NumberOp.GREATER_THAN, 0.5)),
        ),
    )


def test_an_operator_typed_in_a_cell_keeps_its_meaning() -> None:
    request = table_request(0, 20, None, "{host} i= node-07 && {risk} i<= 3", COLUMNS, MAX_ROWS)
    assert request is not None
    assert request.filters == (
        ColumnFilter("host", TextCondition(TextOp.EQUALS, "node-07")),
        ColumnFilter("risk", NumberCondition(NumberOp.LESS_THAN_OR_EQUAL, 3.0)),
    )


def test_no_sort_and_no_filter_is_the_rows_own_order() -> None:
    assert table_request(0, 20, [], "", COLUMNS, MAX_ROWS) == BlockRequest(0, 20)


@pytest.mark.parametrize(
    ("page", "sort_by", "query"),
    [
        (-1, None, ""),
        (MAX_ROWS, None, ""),
        (True, None, ""),
        (1.0, None, ""),
        (0, "risk", ""),
        (0, [{"column_id": "why", "direction": "asc"}], ""),
        (0, [["risk", "asc"]], ""),
        (0, None, "{why} icontains x"),
        (0, None, "{risk} i> abc"),
        (0, None, "{risk} i> inf"),
        (0, None, "{host} i> node"),
        (0, None, "{host} matches .*"),
        (0, None, "{host} icontains a || {risk} i> 0.5"),
        (0, None, "{host} icontains a && {host} icontains b"),
        (0, None, '{host} icontains "unterminated'),
        (0, None, "{host} icontains " + "x" * 300),
        (0, None, "y" * 3000),
        (0, None, 7),
    ],
)
def test_a_request_the_table_could_not_have_sent_is_refused(
    page: object, sort_by: object, query: object
) -> None:
    assert table_request(page, 20, sort_by, query, COLUMNS, MAX_ROWS) is None
