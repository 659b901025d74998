"""The rows of a table served in pages, kept per round of the data they come from, and the orders that
its viewers' sorts and filters put them in, both bounded.

A round is what a page's render names the data by (for the predictions page: the newest scoring round and
the number of GPUs scored), so each row is built once per round (a GPU's explanations parsed once, not
per block request) and a viewer paging through a sorted, filtered list sorts it once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dashboard.block_request import BlockRequest
from dashboard.block_rows import select

# Two rounds: the one shown and the one a refresh is moving to.
ROUNDS_KEPT: Final = 2
# Orders (a position per row) across rounds: a few viewers' sorts and filters each.
ORDERS_KEPT: Final = 16


@dataclass(frozen=True)
class Listing:
    """A round's rows, in the source's own order, and what a page says about them."""

    round_key: str
    rows: Sequence[Mapping[str, Any]]
    about: Mapping[str, Any] = field(default_factory=dict)


class ListingCache:
    """Listings by round, the newest ROUNDS_KEPT, and ORDERS_KEPT orders of them; safe across threads."""

    def __init__(self, rounds: int = ROUNDS_KEPT, orders: int = ORDERS_KEPT) -> None:
        self._rounds = rounds
        self._orders_kept = orders
        self._listings: OrderedDict[str, Listing] = OrderedDict()
        self._newest: Listing | None = None  # the last loaded: loads read the store as of now
        self._orders: OrderedDict[tuple[str, Hashable], list[int]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading = threading.Lock()  # one load at a time: concurrent misses of a round load it once

    def listing(self, round_key: str, load: Callable[[], Listing]) -> Listing:
        """The round's listing, loaded on a miss. A load may find a newer round than the one asked for
        (the asker's was evicted and the data moved on): it is kept under its own key and returned."""
        found = self._get(round_key)
        if found is not None:
            return found
        with self._loading:
            found = self._get(round_key)
            if found is not None:
                return found
            loaded = load()
            with self._lock:
                self._newest = loaded
                self._listings[loaded.round_key] = loaded
                self._listings.move_to_end(loaded.round_key)
                while len(self._listings) > self._rounds:
                    self._listings.popitem(last=False)
            return loaded

    def shown(self, round_key: str, load: Callable[[], Listing]) -> Listing:
        """The listing of the round a page was drawn from, for its block requests: that round if kept, else
        the newest kept (the page's next refresh moves it there); loaded only when none is. The key is the
        browser's, so a forged one, or one whose round has left the cache, must not cost a read of every
        row per request: only a render, whose key the server reads, loads a new round (`listing`)."""
        with self._lock:
            found = self._listings.get(round_key)
            if found is not None:
                self._listings.move_to_end(round_key)
                return found
            if self._newest is not None:
                return self._newest
        return self.listing(round_key, load)

    def order(self, listing: Listing, request: BlockRequest) -> list[int]:
        """The positions of the listing's rows that the request's filters keep, in its sort's order."""
        key = (listing.round_key, request.view_key())
        with self._lock:
            found = self._orders.get(key)
            if found is not None:
                self._orders.move_to_end(key)
                return found
        # Sorted outside the lock: another viewer's block waits for no one's sort.
        made = select(listing.rows, request)
        with self._lock:
            self._orders[key] = made
            while len(self._orders) > self._orders_kept:
                self._orders.popitem(last=False)
        return made

    def _get(self, round_key: str) -> Listing | None:
        with self._lock:
            found = self._listings.get(round_key)
            if found is not None:
                self._listings.move_to_end(round_key)
            return found
