"""Dashboard render times in a real browser over a 2,048-host x 8-GPU x 24 h store (bench/dashboard_store.py).

For each page: time to first render (navigate in a new tab until the page body, every plot and every table
in it are drawn, an AG Grid with its first rows, a table served in pages with its first page of rows of
its page's round; the browser's cache and its scripts' code cache are warm, after one load of the fleet page
and --warm untimed loads of the page itself, as for an operator who has the dashboard open) and time to a
live refresh (the refresh button, i.e. the callback that dcc.Interval fires, until the refreshed page is
drawn), p50 and p95 over --runs; the clock moves 15 s between refreshes so that each one has changed data to
show. Also the server-side render time of each page
(queries plus building the components), which is the part that grows with the fleet.

Headless Debian chromium driven by Playwright; the dashboard served by `serve_dashboard` in this process on
loopback, over the store opened read-only, with the clock fixed at the store's end.

With --compare-src DIR (an export of another commit, e.g. `git archive c86030b | tar -x -C DIR`), that
tree's dashboard and this one's are each served by a child process over the same store and clock, and every
page is loaded from one then the other in turn, so both see the same moments of a shared machine's load.

Usage: python bench/dashboard_render.py [--store /tmp/fg-dbench/dbench.duckdb] [--runs 20] [--build]
                                        [--only fleet,job] [--warm 1] [--compare-src /tmp/old-tree]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dashboard_store import END_TS, build
from dashboard.app import create_app
from dashboard.context import DashboardContext
from dashboard.pages.live import PageSpec, clean_params
from dashboard.server import serve_dashboard
from fleetguard.config import load_config
from fleetguard.store import Store
from tests.dashboard.browser import SERVED_TABLES_DRAWN_JS, chromium

TIMEOUT_MS = 120_000
REFRESHES = """(id) => {
  const s = document.querySelector('#' + id + '-stamp [data-refresh]');
  return s ? Number(s.getAttribute('data-refresh')) : 0;
}"""
DRAWN = """(id) => {
  const SKIP = new Set(['figure', 'data', 'rowData', 'columnDefs', 'columns']);  // data, not components
  const body = document.getElementById(id + '-body');
  if (!body || body.children.length === 0) return false;
  if (document.querySelector('[data-dash-is-loading="true"]')) return false;
  // .dash-graph, not .js-plotly-plot: a graph whose plotly bundle is still loading has no plot yet.
  for (const p of body.querySelectorAll('.dash-graph')) {
    if (!p.querySelector('.main-svg')) return false;
  }
  // Every DataTable and AG Grid in Dash's layout has drawn its header (each draws nothing until its chunk
  // has loaded). Counted from the layout, not from a wrapper's class: the trees compared wrap them apart.
  // Dash 4 keeps the layout under {components: ...}, and a component may sit in any prop, not only children
  // (an earlier walk that read props.children from the top found no table at all in Dash 4's store).
  const wanted = {DataTable: 0, AgGrid: 0};
  const walk = (node) => {
    if (Array.isArray(node)) { node.forEach(walk); return; }
    if (!node || typeof node !== 'object') return;
    if (typeof node.namespace === 'string' && node.props) {
      if (node.type in wanted) wanted[node.type] += 1;
      for (const [k, v] of Object.entries(node.props)) if (!SKIP.has(k)) walk(v);
      return;
    }
    Object.values(node).forEach(walk);
  };
  walk(window.store && window.store.getState().layout);
  const drawn = (sel, head) =>
    Array.from(document.querySelectorAll(sel)).filter(t => t.querySelector(head)).length;
  if (drawn('.dash-table-container', 'th.dash-header') < wanted.DataTable) return false;
  if (drawn('.ag-root-wrapper', '.ag-header-cell') < wanted.AgGrid) return false;
  // Every AG Grid shows its first rows (or says it has none): the trees before session 9 drew `?list=all`
  // in one, with every row in the layout.
  for (const g of body.querySelectorAll('.ag-root-wrapper')) {
    const row = g.querySelector('.ag-center-cols-container .ag-row:not(.ag-row-loading) .ag-cell');
    if (!row && !g.querySelector('.ag-overlay-no-rows-wrapper')) return false;
  }
  // A table served in pages (`?list=all` since session 9) draws its header before its rows: drawn once it
  // shows the page of rows of the round its page names (after a refresh that names a new round: that
  // round's rows, not the ones it showed before).
  return (SERVED_TABLES_DRAWN)();
}""".replace("SERVED_TABLES_DRAWN", SERVED_TABLES_DRAWN_JS)


# A dashboard served from the tree on sys.path[0] (this one's or --compare-src's) over the store read-only;
# its clock is the store's end plus the seconds in the clock file, which `tick` rewrites.
CHILD_SERVER = """
import sys
from pathlib import Path
from dashboard.server import serve_dashboard
from fleetguard.config import load_config
from fleetguard.store import Store
store_path, clock_path, end = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
def now():
    try:
        return end + float(clock_path.read_text() or 0)
    except (OSError, ValueError):
        return end
config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
with Store.open(store_path, read_only=True) as store:
    server = serve_dashboard(store, config, port=0, now=now)
    # Measured as an operator finds a dashboard that has been up a while: its fleet model built (a tree
    # without the background build has its first visitor build it, as it did).
    getattr(server, "wait_ready", lambda _timeout: True)(300.0)
    print(server.url, flush=True)
    sys.stdin.read()
    server.close()
"""


def serve_child(src: Path, store: Path, clock: Path) -> tuple[subprocess.Popen[str], str]:
    """A dashboard from the tree `src` in a child process (stdin closed = stop) and its URL."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_SERVER, str(store), str(clock), str(END_TS)],
        cwd=src,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    url = child.stdout.readline().strip()
    if not url.startswith("http"):
        child.kill()
        child.wait()
        raise SystemExit(f"the dashboard from {src} did not start")
    return child, url


def stop_child(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def pages(store: Store) -> list[tuple[str, str]]:
    """(page id, path) for every page, with a real host, GPU, job and incident of the store."""
    cur = store.cursor()
    gpu = cur.execute("SELECT device_id, host FROM predictions ORDER BY risk DESC LIMIT 1").fetchone()
    incident = cur.execute("SELECT incident_id FROM incidents ORDER BY last_seen DESC LIMIT 1").fetchone()
    job = cur.execute("SELECT job_id FROM heartbeats LIMIT 1").fetchone()
    assert gpu and incident and job, "the store lacks predictions, incidents or jobs"
    uuid, host = gpu
    return [
        ("fleet", "/"),
        ("host", f"/hosts/{host}"),
        ("gpu", f"/gpus/{uuid}"),
        ("gpu", f"/gpus/{uuid}?window=24h"),
        ("network", "/network"),
        ("jobs", "/jobs"),
        ("job", f"/jobs/{job[0]}"),
        ("incidents", "/incidents"),
        ("incident", f"/incidents/{incident[0]}"),
        ("predictions", "/predictions"),
        ("predictions", "/predictions?list=all"),
        ("alerts", "/alerts"),
        ("policy", "/policy"),
    ]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _load_once(
    browser: Any, url: str, page_id: str, path: str, tick: Callable[[], None]
) -> tuple[float, list[float]]:
    """One first render in a new tab and two live refreshes after it."""
    refresh = []
    page = browser.new_page()
    started = time.perf_counter()
    page.goto(url.rstrip("/") + path)
    page.wait_for_function(DRAWN, arg=page_id, timeout=TIMEOUT_MS)
    first = time.perf_counter() - started
    for _ in range(2):
        before = page.evaluate(REFRESHES, page_id)
        tick()
        started = time.perf_counter()
        page.click(f"#{page_id}-refresh")
        page.wait_for_function(f"(id) => ({REFRESHES})(id) > {before}", arg=page_id, timeout=TIMEOUT_MS)
        page.wait_for_function(DRAWN, arg=page_id, timeout=TIMEOUT_MS)
        refresh.append(time.perf_counter() - started)
    page.close()
    return first, refresh


def _draw_untimed(browser: Any, url: str, page_id: str) -> None:
    page = browser.new_page()
    page.goto(url)
    page.wait_for_function(DRAWN, arg=page_id, timeout=TIMEOUT_MS)
    page.close()


def measure_browser(
    urls: dict[str, str],
    targets: list[tuple[str, str]],
    runs: int,
    tick: Callable[[], None],
    warm_loads: int = 1,
) -> dict[tuple[str, str], dict[str, float]]:
    """`urls`: a dashboard per side (this tree, and the compared one); each run loads the page from every
    side in turn. `tick` moves the dashboards' clock before each refresh, so every refresh has changed data
    to show (ages, states), as a live one does: a refresh that finds nothing changed sends almost nothing.

    Before timing, the fleet page is loaded once (the cache filled with Dash's bundles) and then every page
    once, then every page `warm_loads` times untimed on every side (`--warm`), just before its own timed
    loads. V8 compiles a script it meets for the first time, compiles it again and writes its code cache
    the second time, and reads that cache from the third on: without the page's own warm-up, the page timed
    first (the fleet page) paid the second compile in its first timed load, and other pages' first loads of
    a chunk (a table's, dcc's graph) did too, while an operator with the dashboard open is long past that
    (BENCHMARKS.md "First render, session 7"); without the pass over every page, the first page timed that
    draws a figure paid plotly.js's once the fleet page drew none ("First render, session 8")."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    with chromium() as browser:
        for url in urls.values():
            _draw_untimed(browser, url, "fleet")  # fills the cache with Dash's bundles once
            # Every page once, before any page's own warm-up: every script a page runs is then met a first
            # time here, whichever page first draws a figure or a table (the fleet page draws no figure
            # since "First render, session 8", so the first page timed with one met plotly.js's second
            # compile in its first timed load).
            for page_id, path in targets:
                _draw_untimed(browser, url.rstrip("/") + path, page_id)
        for page_id, path in targets:
            for url in urls.values():
                for _ in range(warm_loads):
                    _draw_untimed(browser, url.rstrip("/") + path, page_id)
            first: dict[str, list[float]] = {side: [] for side in urls}
            refresh: dict[str, list[float]] = {side: [] for side in urls}
            for _ in range(runs):
                for side, url in urls.items():
                    took, refreshes = _load_once(browser, url, page_id, path, tick)
                    first[side].append(took)
                    refresh[side].extend(refreshes)
            assert not browser.errors, browser.errors[:3]
            for side in urls:
                row = {
                    "first_p50": statistics.median(first[side]),
                    "first_p95": pct(first[side], 0.95),
                    "refresh_p50": statistics.median(refresh[side]),
                    "refresh_p95": pct(refresh[side], 0.95),
                }
                out[(side, path)] = row
                print(
                    f"{side:6s} {path[:54]:54s} first p50 {row['first_p50']:.3f} p95 {row['first_p95']:.3f}  "
                    f"refresh p50 {row['refresh_p50']:.3f} p95 {row['refresh_p95']:.3f}  "
                    f"first, in order: {' '.join(f'{t:.2f}' for t in first[side])}",
                    flush=True,
                )
    return out


def measure_server(
    app_ctx: DashboardContext, specs: dict[str, PageSpec], targets: list[tuple[str, str]], runs: int
) -> dict[str, float]:
    out = {}
    for page_id, path in targets:
        spec = specs[page_id]
        segment, _, query = path.partition("?")
        given: dict[str, Any] = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        if spec.path_vars:
            given[spec.path_vars[0]] = segment.rsplit("/", 1)[1]
        params = clean_params(spec, given)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            spec.render(app_ctx, params)
            times.append(time.perf_counter() - started)
        out[path] = pct(times, 0.95)
    return out


def shown_path(target: str) -> str:
    """`target` as the tables show it: the id in a page's path elided, its query kept (once)."""
    path, _, query = target.partition("?")
    shown = path.rsplit("/", 1)[0] + "/…" if path.count("/") > 1 else path
    return shown + ("?" + query if query else "")


def print_compared(browser: dict[tuple[str, str], dict[str, float]], targets: list[tuple[str, str]]) -> None:
    print(
        "\n| page | first render p50 / p95, compared | this tree | live refresh p50 / p95, compared | this |"
    )
    print("|---|---|---|---|---|")
    for _, target in targets:
        a, b = browser[("before", target)], browser[("this", target)]
        print(
            f"| `{shown_path(target)}` | {a['first_p50']:.2f} / {a['first_p95']:.2f} s | "
            f"{b['first_p50']:.2f} / {b['first_p95']:.2f} s | "
            f"{a['refresh_p50']:.2f} / {a['refresh_p95']:.2f} s | "
            f"{b['refresh_p50']:.2f} / {b['refresh_p95']:.2f} s |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="/tmp/fg-dbench/dbench.duckdb")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--build", action="store_true", help="build the store first (minutes)")
    parser.add_argument("--only", default="", help="comma-separated page ids to measure (default: all)")
    parser.add_argument(
        "--warm",
        type=int,
        default=1,
        help="untimed loads of each page just before its timed ones, on every side (after one pass over all)",
    )
    parser.add_argument(
        "--compare-src", default="", help="another tree's root: its dashboard is measured beside this one's"
    )
    args = parser.parse_args()
    path = Path(args.store)
    if args.build:
        print(json.dumps(build(path), indent=2), flush=True)
    if args.compare_src:
        compare(path, Path(args.compare_src).resolve(), args)
        return
    with Store.open(path, read_only=True) as store:
        counts = {t: n for t, n in store.counts().items() if n}
        print(f"store {path}: {path.stat().st_size / 2**30:.2f} GiB, rows {counts}", flush=True)
        targets = select(pages(store), args.only)
        browser, server_p95 = time_served(store, targets, args.runs, END_TS, args.warm)
    print_rows("page", [(t, shown_path(t)) for _, t in targets], browser, server_p95)


def time_served(
    store: Store, targets: list[tuple[str, str]], runs: int, end: float, warm_loads: int = 1
) -> tuple[dict[tuple[str, str], dict[str, float]], dict[str, float]]:
    """`targets` of a dashboard served over `store` on loopback, its clock at `end`: the browser's timings
    (measure_browser) and each page's server-side render p95 (measure_server)."""
    from dashboard.app import PAGES

    # The refresh button fires the callback dcc.Interval fires; no timer in between the measurements.
    config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
    # The clock moves between the store's end and 15 s later on every refresh: the data shown changes
    # (every age in every table), the windows stay where the store has data.
    clock = [end]

    def tick() -> None:
        clock[0] = end + 15.0 if clock[0] == end else end

    server = serve_dashboard(store, config, port=0, now=lambda: clock[0])
    try:
        server.wait_ready(300.0)  # a dashboard that has been up a while (its fleet model built)
        # The server-side figure from an app of its own over the same store (the served one is behind
        # the WSGI adapter): the same pages and queries, its own fleet model.
        ctx = create_app(store, config, now=lambda: clock[0]).server.config["fleetguard.dashboard"]
        ctx.fleet.get()  # built before the pages are timed, as the served one's is (by its keeper)
        server_p95 = measure_server(ctx, {p.page_id: p for p in PAGES}, targets, max(5, runs // 2))
        browser = measure_browser({"this": server.url}, targets, runs, tick, warm_loads)
    finally:
        server.close()
    return browser, server_p95


def print_rows(
    title: str,
    shown: list[tuple[str, str]],
    browser: dict[tuple[str, str], dict[str, float]],
    server_p95: dict[str, float],
) -> None:
    """A markdown row per (target, how it is shown) of time_served's figures."""
    print(f"\n| {title} | first render p50 | p95 | live refresh p50 | p95 | server render p95 |")
    print("|---|---|---|---|---|---|")
    for target, label in shown:
        b = browser[("this", target)]
        print(
            f"| `{label}` | {b['first_p50']:.2f} s | {b['first_p95']:.2f} s | "
            f"{b['refresh_p50']:.2f} s | {b['refresh_p95']:.2f} s | {server_p95[target]:.2f} s |"
        )


def select(targets: list[tuple[str, str]], only: str) -> list[tuple[str, str]]:
    return [t for t in targets if t[0] in only.split(",")] if only else targets


def compare(path: Path, src: Path, args: argparse.Namespace) -> None:
    """This tree's dashboard and `src`'s, each in a child process over the same store and clock."""
    with Store.open(path, read_only=True) as store:
        targets = select(pages(store), args.only)
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="fg-dbench-clock-") as tmp:
        clock = Path(tmp) / "clock"
        clock.write_text("0")

        def tick() -> None:
            clock.write_text("15" if clock.read_text() == "0" else "0")

        children = []
        try:
            before, before_url = serve_child(src, path, clock)
            children.append(before)
            this, this_url = serve_child(here, path, clock)
            children.append(this)
            browser = measure_browser(
                {"before": before_url, "this": this_url}, targets, args.runs, tick, args.warm
            )
        finally:
            for child in children:
                stop_child(child)
    print_compared(browser, targets)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
