"""What every page reads from: the store, the clock and the dashboard's settings, one object per app."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import flask

from dashboard.listing_cache import ListingCache
from dashboard.queries.base import Cursor, StoreReader
from fleetguard.config import Config

if TYPE_CHECKING:
    from dashboard.operator import OperatorDesk
    from dashboard.snapshot import SnapshotCache

_CONFIG_KEY: Final = "fleetguard.dashboard"


@dataclass(frozen=True)
class DashboardContext:
    reader: StoreReader
    now: Callable[[], float]  # wall-clock epoch seconds; the tests' fixed clock makes pages reproducible
    refresh_seconds: float
    risk_threshold: float
    config: Config  # the process's settings (the policy page shows the policy they select)
    fleet: SnapshotCache  # the fleet model, shared by the fleet and network pages
    desk: OperatorDesk  # write actions (acknowledge, silence, resolve, replay), each checked for the token
    listings: ListingCache  # the rows of the tables served in pages, per round (`dashboard.served_rows`)

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Cursor]:
        """A cursor for one request, closed after it: concurrent requests never share one."""
        cur = self.reader.cursor()
        try:
            yield cur
        finally:
            cur.close()


def install(server: flask.Flask, ctx: DashboardContext) -> None:
    server.config[_CONFIG_KEY] = ctx


def context_of(server: flask.Flask) -> DashboardContext:
    ctx = server.config[_CONFIG_KEY]
    assert isinstance(ctx, DashboardContext)
    return ctx


def current() -> DashboardContext:
    """The context of the app serving this request (page layouts run inside Flask's request)."""
    ctx = flask.current_app.config[_CONFIG_KEY]
    assert isinstance(ctx, DashboardContext)
    return ctx
