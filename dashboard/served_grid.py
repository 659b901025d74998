"""The server's side of a grid served in blocks (`components.served_table`): the callback that answers
each block request from the listing of the round the page shows, and the one that has the grid ask again
for its blocks when a refresh names a new round.

A block request is the browser's: it is checked field by field (`dashboard.block_request`) and a bad one
is answered with an empty block. The rows come from the page's `ListingSource`, which keeps them per round
(`dashboard.listing_cache`), and are sorted and filtered in Python (`dashboard.block_rows`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import dash
from dash import Input, Output, State

from dashboard.block_request import BlockRequest, ColumnType, parse_block_request
from dashboard.block_rows import block
from dashboard.components import Col, grid_id
from dashboard.context import DashboardContext, current
from dashboard.listing_cache import Listing
from dashboard.live_slots import SlotKind, pattern

log = logging.getLogger(__name__)

# The listing of a round (`round_key`, as the page's render named it; "" or a stale one: the newest).
ListingSource = Callable[[DashboardContext, str], Listing]

# Each row of a block says which round it is from: a test or the benchmark tells a refreshed block from the
# one before by it, as the page's slot names the round it shows.
ROUND_FIELD: Final = "_round"
MAX_ROUND_KEY_CHARS: Final = 128
EMPTY_BLOCK: Final[Mapping[str, Any]] = {"rowData": [], "rowCount": 0}

# Run in the browser when the page's round slot changes: the grid asks again for the blocks it holds, where
# it stands (page, sort and filter kept). A grid not drawn yet (its bundle still loading) asks for its first
# block when it is.
_REFRESH_JS: Final = """function (round) {
  var grids = window.dash_ag_grid;
  var api = grids && grids.getApi ? grids.getApi(%s) : null;
  if (api && !api.isDestroyed()) api.refreshInfiniteCache();
}"""


def column_types(columns: Sequence[Col]) -> dict[str, ColumnType]:
    """What each column of the grid holds, as its filter sends it: a number filter or a text one."""
    return {c.id: ColumnType.NUMBER if c.kind in ("number", "int") else ColumnType.TEXT for c in columns}


def answer_block(
    ctx: DashboardContext,
    raw: object,
    round_key: object,
    source: ListingSource,
    columns: Mapping[str, ColumnType],
    max_rows: int,
) -> Mapping[str, Any]:
    """The block a request asks for and how many rows its filters keep; an empty block when the request is
    not one this grid could have sent (logged in one line)."""
    request = parse_block_request(raw, columns, max_rows)
    if request is None:
        log.warning("dashboard: a block request out of bounds or of the wrong shape was answered empty")
        return EMPTY_BLOCK
    key = round_key if isinstance(round_key, str) and len(round_key) <= MAX_ROUND_KEY_CHARS else ""
    listing = source(ctx, key)
    return _block_of(ctx, listing, request)


def _block_of(ctx: DashboardContext, listing: Listing, request: BlockRequest) -> Mapping[str, Any]:
    order = ctx.listings.order(listing, request)
    rows = block(listing.rows, order, request)
    for row in rows:
        row[ROUND_FIELD] = listing.round_key
    return {"rowData": rows, "rowCount": len(order)}


def serve_blocks(
    app: dash.Dash, page_id: str, table_id: str, columns: Sequence[Col], source: ListingSource, max_rows: int
) -> None:
    """Register the callbacks of the served table `table_id` on the page `page_id`."""
    grid = grid_id(table_id)
    held = pattern(SlotKind.BLOCKS, page_id, table_id)
    types = column_types(columns)

    @app.callback(  # type: ignore[misc]
        Output(grid, "getRowsResponse"),
        Input(grid, "getRowsRequest"),
        State(held, "data"),
        prevent_initial_call=True,
    )
    def answer(raw: object, round_key: object) -> Mapping[str, Any]:
        ctx = current()
        try:
            return answer_block(ctx, raw, round_key, source, types, max_rows)
        except Exception:
            # The store failed under the read (a daemon never dies on it): the grid shows no rows, the
            # traceback goes to the log only.
            log.exception("dashboard: the block of %s could not be read", table_id)
            return EMPTY_BLOCK

    app.clientside_callback(  # type: ignore[no-untyped-call]
        _REFRESH_JS % json.dumps(grid), Input(held, "data"), prevent_initial_call=True
    )
