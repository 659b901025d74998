"""The server's side of a table served in pages (`components.served_table`): the callback that answers its
page of rows, sorted and filtered as the browser asks, from the listing of the round the page shows, as
soon as the table is drawn, on every change of page, sort or filter, and when a refresh names a new round.

The request is the browser's: it is checked field by field (`dashboard.table_query`,
`dashboard.block_request`) and a bad one is answered with no rows. The rows come from the page's
`ListingSource`, which keeps them per round (`dashboard.listing_cache`), and are sorted and filtered in
Python (`dashboard.block_rows`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import dash
from dash import Input, Output

from dashboard.block_request import BlockRequest, ColumnType
from dashboard.block_rows import block
from dashboard.components import Col, count_id, rows_id, with_links
from dashboard.context import DashboardContext, current
from dashboard.listing_cache import Listing
from dashboard.live_slots import SlotKind, pattern
from dashboard.table_query import table_request

log = logging.getLogger(__name__)

# The listing of a round (`round_key`, as the page's render named it; "" or a stale one: the newest).
ListingSource = Callable[[DashboardContext, str], Listing]

# Each row says which round it is from: a test or the benchmark tells a refreshed page from the one before
# by it, as the page's slot names the round it shows.
ROUND_FIELD: Final = "_round"
MAX_ROUND_KEY_CHARS: Final = 128


@dataclass(frozen=True)
class Page:
    """What the table is sent: its rows, how many pages its filters leave, the line that counts them."""

    rows: list[dict[str, Any]]
    page_count: int
    count_text: str


NO_ROWS: Final = Page([], 1, "no rows: the request could not be read")


def column_types(columns: Sequence[Col]) -> dict[str, ColumnType]:
    """What each column holds, as its filter compares it: as numbers or as text."""
    return {c.id: ColumnType.NUMBER if c.kind in ("number", "int") else ColumnType.TEXT for c in columns}


def answer_page(
    ctx: DashboardContext,
    request: BlockRequest | None,
    round_key: object,
    source: ListingSource,
    columns: Sequence[Col],
    page_size: int,
) -> Page:
    """The page a request asks for, its rows' links drawn, and how many rows its filters keep; no rows when
    the request is not one the table could have sent (logged in one line)."""
    if request is None:
        log.warning("dashboard: a table page request out of bounds or of the wrong shape was answered empty")
        return NO_ROWS
    key = round_key if isinstance(round_key, str) and len(round_key) <= MAX_ROUND_KEY_CHARS else ""
    listing = source(ctx, key)
    order = ctx.listings.order(listing, request)
    rows = []
    for row in block(listing.rows, order, request):
        row[ROUND_FIELD] = listing.round_key
        rows.append(with_links(row, columns))
    total = len(listing.rows)
    count = f"{total:,} rows" if len(order) == total else f"{len(order):,} of {total:,} rows match"
    return Page(rows, max(1, -(-len(order) // page_size)), count)


def serve_pages(
    app: dash.Dash,
    page_id: str,
    table_id: str,
    columns: Sequence[Col],
    source: ListingSource,
    max_rows: int,
    page_size: int,
) -> None:
    """Register the callback of the served table `table_id` on the page `page_id`."""
    table = rows_id(table_id)
    types = column_types(columns)

    @app.callback(  # type: ignore[misc]
        Output(table, "data"),
        Output(table, "page_count"),
        Output(count_id(table_id), "children"),
        Input(pattern(SlotKind.BLOCKS, page_id, table_id), "data"),
        Input(table, "page_current"),
        Input(table, "sort_by"),
        Input(table, "filter_query"),
    )
    def answer(round_key: object, page_current: object, sort_by: object, query: object) -> tuple[Any, ...]:
        ctx = current()
        try:
            request = table_request(page_current, page_size, sort_by, query, types, max_rows)
            page = answer_page(ctx, request, round_key, source, columns, page_size)
        except Exception:
            # The store failed under the read (a daemon never dies on it): the table shows no rows, the
            # traceback goes to the log only.
            log.exception("dashboard: the rows of %s could not be read", table_id)
            page = Page([], 1, "the rows could not be read: see the dashboard's log")
        return page.rows, page.page_count, page.count_text
