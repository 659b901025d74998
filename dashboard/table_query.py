"""A served DataTable's page, sort and filter, as the browser sent them, read into a `BlockRequest`.

DataTable's custom paging, sorting and filtering send `page_current`, `sort_by` and `filter_query`, a
string its filter row writes: one `{column} operator value` per column joined by ` && `
(`{host} icontains node-07 && {risk} i> 0.5`, `{why} is blank`; a value with a space is quoted). This
reads that grammar only, strictly, into the shape AG Grid's block request has, so that one checker
(`dashboard.block_request.parse_block_request`) bounds every field; anything else is None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from dashboard.block_request import BlockRequest, ColumnType, parse_block_request

MAX_QUERY_CHARS: Final = 2048
MAX_PAGE_ROWS: Final = 100
_JOIN: Final = " && "
_PART: Final = re.compile(
    r"\{(?P<column>[^{}]{1,64})\} (?:(?P<blank>is blank)|(?P<op>[a-z!<>=]{1,10}) "
    r'(?P<value>"(?:[^"\\]|\\.){0,256}"|[^\s"]{1,256}))'
)
# DataTable's operators (each also with an "i" or "s" prefix: case-insensitive or -sensitive) as AG Grid's.
_TEXT_OPS: Final = {"contains": "contains", "=": "equals", "eq": "equals", "!=": "notEqual", "ne": "notEqual"}
_NUMBER_OPS: Final = {
    "=": "equals",
    "eq": "equals",
    "!=": "notEqual",
    "ne": "notEqual",
    "<": "lessThan",
    "lt": "lessThan",
    "<=": "lessThanOrEqual",
    "le": "lessThanOrEqual",
    ">": "greaterThan",
    "gt": "greaterThan",
    ">=": "greaterThanOrEqual",
    "ge": "greaterThanOrEqual",
}


def table_request(
    page_current: object,
    page_size: int,
    sort_by: object,
    filter_query: object,
    columns: Mapping[str, ColumnType],
    max_rows: int,
) -> BlockRequest | None:
    """The rows of the page asked for, sorted and filtered as asked, or None if anything is malformed."""
    if not isinstance(page_current, int) or isinstance(page_current, bool) or page_current < 0:
        return None
    if not 0 < page_size <= MAX_PAGE_ROWS or page_current > max_rows // page_size:
        return None
    sort_model = _sort_model(sort_by)
    filter_model = _filter_model(filter_query, columns)
    if sort_model is None or filter_model is None:
        return None
    start = page_current * page_size
    raw = {
        "startRow": start,
        "endRow": min(start + page_size, max_rows),
        "sortModel": sort_model,
        "filterModel": filter_model,
    }
    return parse_block_request(raw, columns, max_rows)


def _sort_model(sort_by: object) -> list[dict[str, object]] | None:
    if sort_by is None:
        return []
    if not isinstance(sort_by, list):
        return None
    out = []
    for item in sort_by:
        if not isinstance(item, dict):
            return None
        out.append({"colId": item.get("column_id"), "sort": item.get("direction")})
    return out  # the column and direction are checked by parse_block_request


def _filter_model(query: object, columns: Mapping[str, ColumnType]) -> dict[str, Any] | None:
    if query is None or query == "":
        return {}
    if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
        return None
    model: dict[str, Any] = {}
    for part in query.split(_JOIN):
        found = _PART.fullmatch(part)
        kind = columns.get(found["column"]) if found else None
        condition = None if found is None or kind is None else _condition(found, kind)
        if condition is None or found is None or found["column"] in model:
            return None  # the filter row writes one part per column
        model[found["column"]] = condition
    return model


def _condition(part: re.Match[str], kind: ColumnType) -> dict[str, object] | None:
    if part["blank"]:
        return {"filterType": kind.value, "type": "blank"}
    op = part["op"]
    bare = op[1:] if op[:1] in ("i", "s") and op[1:] else op
    value = _unquoted(part["value"])
    if kind == ColumnType.TEXT:
        text_op = _TEXT_OPS.get(bare)
        return None if text_op is None else {"filterType": "text", "type": text_op, "filter": value}
    number_op = _NUMBER_OPS.get(bare)
    try:
        number = float(value)
    except ValueError:
        return None
    if number_op is None:
        return None
    return {"filterType": "number", "type": number_op, "filter": number}


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value
