"""Server-side cost of every GPU scored (`/predictions?list=all`) served in pages, over the 2,048-host bench
store (bench/dashboard_store.py): the page's render on a new scoring round (the round's rows built) and on
the same round, and the pages its table asks for (the first page, a new sort, a new filter).

Each run uses a fresh app, so its first render meets a new round, as the first refresh after a round does.

Usage: python bench/served_pages.py [--store /tmp/fg-dbench-s4/dbench.duckdb] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dashboard_store import END_TS
from dashboard.app import create_app
from dashboard.context import DashboardContext
from dashboard.pages import predictions
from dashboard.queries.predictions import risk_summary
from dashboard.served_rows import answer_page, column_types
from dashboard.table_query import table_request
from fleetguard.config import load_config
from fleetguard.store import Store


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _one_run(ctx: DashboardContext, host_text: str) -> dict[str, float]:
    out = {
        "render, new round (rows built)": _timed(lambda: predictions.render(ctx, {"list": "all"})),
        "render, same round": _timed(lambda: predictions.render(ctx, {"list": "all"})),
    }
    with ctx.cursor() as cur:
        summary = risk_summary(cur, END_TS, ctx.risk_threshold, predictions.BINS)
    key = predictions.round_key(summary.newest_ts, summary.scored)
    types = column_types(predictions.ALL_COLUMNS)
    rows = predictions.PAGE_ROWS
    asks = {
        "first page": (None, ""),
        "page sorted by risk ascending (a new sort)": ([{"column_id": "risk", "direction": "asc"}], ""),
        f"page filtered by host {host_text!r} (a new filter)": (None, f"{{host}} icontains {host_text}"),
    }
    for name, (sort_by, query) in asks.items():
        request = table_request(0, rows, sort_by, query, types, predictions.MAX_LISTED)
        out[name] = _timed(
            lambda request=request: answer_page(  # type: ignore[misc]
                ctx, request, key, predictions.served_listing, predictions.ALL_COLUMNS, rows
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="/tmp/fg-dbench-s4/dbench.duckdb")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--host", default="host-042", help="the text the host filter looks for")
    args = parser.parse_args()
    config = load_config(env={})
    times: dict[str, list[float]] = {}
    with Store.open(Path(args.store), read_only=True) as store:
        for _ in range(args.runs):
            ctx = create_app(store, config, now=lambda: END_TS).server.config["fleetguard.dashboard"]
            for name, took in _one_run(ctx, args.host).items():
                times.setdefault(name, []).append(took)
    print("\n| step | median | max |\n|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values) * 1000:.1f} ms | {max(values) * 1000:.1f} ms |")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
