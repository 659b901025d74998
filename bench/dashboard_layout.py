"""The server's side of a dashboard page's first render: the `_dash-layout` request a new tab makes with the
page named in its header (`dashboard/router.py`), timed in process over the 24 h bench store
(bench/dashboard_store.py), the fleet model built first as a running dashboard has it. What it measures is
what a tab waits for after its HTML: the page's queries, its components, the live slots' digests and Dash's
JSON, with the body's size. No browser: a figure for comparing trees on a loaded machine, where the browser
benches (bench/dashboard_render.py) move by more than the change.

Usage: python bench/dashboard_layout.py --store /tmp/fg-dbench-s4/dbench.duckdb [--runs 9] [--only fleet,gpu]
Another tree's figures: run this file from that tree (`cd DIR && python /path/to/bench/dashboard_layout.py`):
it measures the tree it is run from.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from bench.dashboard_render import pages, select, shown_path  # the tree run from: sys.path[0]
from bench.dashboard_store import END_TS
from dashboard.app import create_app
from dashboard.router import PAGE_HEADER
from fleetguard.config import load_config
from fleetguard.store import Store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="/tmp/fg-dbench/dbench.duckdb")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--only", default="", help="comma-separated page ids (default: all)")
    args = parser.parse_args()
    config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
    print(f"tree {Path.cwd()}\n\n| page | layout median ms | min ms | kB |\n|---|---|---|---|")
    with Store.open(Path(args.store), read_only=True) as store:
        app = create_app(store, config, now=lambda: END_TS)
        app.server.config["fleetguard.dashboard"].fleet.get()  # as a running dashboard has it
        client = app.server.test_client()
        for _, path in select(pages(store), args.only):
            client.get("/_dash-layout", headers={PAGE_HEADER: path})  # warm: DuckDB's caches, Python's
            took = []
            for _ in range(args.runs):
                started = time.perf_counter()
                answer = client.get("/_dash-layout", headers={PAGE_HEADER: path})
                took.append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200, answer.status_code
            print(
                f"| `{shown_path(path)}` | {statistics.median(took):.0f} | {min(took):.0f} | "
                f"{len(answer.data) / 1024:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # bench/ is on sys.path when run

    measured(main)
