"""Where a dashboard page's first render goes, measured inside Chromium (issue 22 item 4).

`bench/dashboard_render.py` times a first render from outside (navigate until drawn). This one splits it with
the browser's own clocks, per page, median over --runs loads in a new tab with a warm cache (after one untimed
load of the page: its scripts' code cache written, as in bench/dashboard_render.py):

- html: the navigation's responseEnd (the HTML, from the request's start);
- boot: from there until Dash's renderer starts (`window.store` set: every script tag fetched and run);
- layout: `_dash-layout` and `_dash-dependencies` until both are in (asked for by the head script before
  the boot, where the tree has one: `dashboard/router.py`);
- page cb: the request carrying the page (the biggest body of the layout and the first render's
  callbacks: the page's callback where Dash's pages drew it, the layout where it comes with the page),
  start to end; of it, server = request sent to first byte (queries + components), its body in kB;
- plotly: running plotly.js's script (from the moment its bytes are in until `window.Plotly` is set); 0
  on a page that never loads it;
- draw: time inside `Plotly.react`/`newPlot`, every figure of the page summed;
- render: the rest after both the page and the renderer are there (drawn - the later of the two - plotly -
  draw): the components built and drawn by React, tables' chunks loaded and run;
- drawn: the bench's "drawn" test (bench/dashboard_render.py's DRAWN) first true, from the navigation's start;
- long: main-thread long tasks (> 50 ms) summed over the whole load.

Usage: python bench/dashboard_render_split.py --store /tmp/fg-dbench-t22/dbench.duckdb [--runs 5]
                                              [--only fleet,gpu] [--src DIR]
--src serves another tree's dashboard (an export of another commit) instead of this one's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dashboard_render import DRAWN, TIMEOUT_MS, pages, select, serve_child, stop_child
from fleetguard.store import Store
from tests.dashboard.browser import chromium

# Installed before any of the page's scripts: records when window.Plotly is set (the end of plotly.js's
# script), the time spent in every Plotly.react/newPlot, and the long tasks; polls the drawn test each frame.
PROBE = """
(() => {
  const fg = window.__fg = {plotlySet: null, storeSet: null, draw: 0, draws: 0, long: 0, drawn: null};
  new PerformanceObserver(l => { for (const e of l.getEntries()) fg.long += e.duration; })
    .observe({type: 'longtask', buffered: true});
  const wrap = (P, name) => {
    const orig = P[name];
    if (typeof orig !== 'function') return;
    P[name] = function (...args) {
      const t0 = performance.now();
      const out = orig.apply(this, args);
      const done = () => { fg.draw += performance.now() - t0; fg.draws += 1; };
      if (out && typeof out.then === 'function') out.then(done, done); else done();
      return out;
    };
  };
  let store;
  Object.defineProperty(window, 'store', {
    configurable: true,
    get() { return store; },
    set(v) { store = v; if (fg.storeSet === null) fg.storeSet = performance.now(); },
  });
  let held;
  Object.defineProperty(window, 'Plotly', {
    configurable: true,
    get() { return held; },
    set(v) {
      held = v;
      if (fg.plotlySet === null) fg.plotlySet = performance.now();
      if (v) { wrap(v, 'react'); wrap(v, 'newPlot'); }
    },
  });
})();
"""
READ = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const one = (part) => res.find(r => r.name.includes(part));
  const layout = one('_dash-layout'), deps = one('_dash-dependencies');
  const cbs = res.filter(r => r.name.includes('_dash-update-component') || r.name.endsWith('_dash-layout'));
  // The request carrying the page is the biggest body among the layout and the first render's callbacks.
  const page = cbs.reduce((a, b) => (!a || b.encodedBodySize > a.encodedBodySize ? b : a), null);
  const plotly = res.find(r => /plotly[^/]*\\.js/.test(r.name) && !r.name.includes('dash_core'));
  const fg = window.__fg;
  const plotlyRun = plotly && fg.plotlySet !== null ? fg.plotlySet - plotly.responseEnd : 0;
  return {
    html: nav.responseEnd,
    boot: fg.storeSet !== null ? fg.storeSet - nav.responseEnd : NaN,
    store_set: fg.storeSet !== null ? fg.storeSet : NaN,
    layout: layout && deps ? Math.max(layout.responseEnd, deps.responseEnd) - layout.startTime : NaN,
    page_cb: page ? page.responseEnd - page.startTime : NaN,
    cb_end: page ? page.responseEnd : NaN,
    server: page ? page.responseStart - page.requestStart : NaN,
    kb: page ? page.encodedBodySize / 1024 : NaN,
    plotly: plotlyRun,
    plotly_kb: plotly ? plotly.decodedBodySize / 1024 : 0,
    draw: fg.draw, draws: fg.draws,
    drawn: fg.drawn,
    long: fg.long,
    scripts_kb: res.filter(r => r.initiatorType === 'script' || r.name.endsWith('.js'))
      .reduce((s, r) => s + r.decodedBodySize, 0) / 1024,
  };
}"""
COLUMNS = ("html", "boot", "layout", "page_cb", "server", "kb", "plotly", "draw", "render", "drawn", "long")


def load_once(browser: Any, url: str, page_id: str) -> dict[str, float]:
    page = browser.new_page()
    page.add_init_script(PROBE)
    page.goto(url)
    page.wait_for_function(DRAWN, arg=page_id, timeout=TIMEOUT_MS)
    page.evaluate("() => { window.__fg.drawn = performance.now(); }")
    page.wait_for_timeout(300)  # a figure's draw promise resolving after the test passed
    out: dict[str, float] = page.evaluate(READ)
    page.close()
    # What is left once the page's callback is in: components built and drawn (tables' chunks loaded and
    # run, React), less plotly's script and the figures' drawing, which have columns of their own.
    out["render"] = out["drawn"] - max(out["cb_end"], out["store_set"]) - out["plotly"] - out["draw"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="/tmp/fg-dbench-t22/dbench.duckdb")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default="")
    parser.add_argument("--src", default="", help="another tree's root, served instead of this one")
    args = parser.parse_args()
    path = Path(args.store)
    with Store.open(path, read_only=True) as store:
        targets = select(pages(store), args.only)
    src = Path(args.src).resolve() if args.src else Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="fg-dsplit-") as tmp:
        clock = Path(tmp) / "clock"
        clock.write_text("0")
        child, url = serve_child(src, path, clock)
        try:
            rows = measure(url, targets, args.runs)
        finally:
            stop_child(child)
    print("\n| page | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for target, row in rows:
        cells = [f"{row[c]:.0f}" if c != "kb" else f"{row[c]:.0f} kB" for c in COLUMNS]
        print(f"| `{target}` | " + " | ".join(cells) + " |")


def measure(url: str, targets: list[tuple[str, str]], runs: int) -> list[tuple[str, dict[str, float]]]:
    rows = []
    with chromium() as browser:
        warm = browser.new_page()
        warm.goto(url)
        warm.wait_for_function(DRAWN, arg="fleet", timeout=TIMEOUT_MS)
        warm.close()
        for page_id, path in targets:
            # One untimed load of the page first, as bench/dashboard_render.py's --warm 1: its scripts' code
            # cache written before the timed loads.
            load_once(browser, url.rstrip("/") + path, page_id)
            loads = [load_once(browser, url.rstrip("/") + path, page_id) for _ in range(runs)]
            row = {c: statistics.median(float(load[c]) for load in loads) for c in COLUMNS}
            print(f"{path[:50]:50s} " + " ".join(f"{c} {row[c]:.0f}" for c in COLUMNS), flush=True)
            shown = path.split("?")[0].rsplit("/", 1)[0] + "/…" if path.count("/") > 1 else path.split("?")[0]
            rows.append((shown + ("?" + path.split("?")[1] if "?" in path else ""), row))
        assert not browser.errors, browser.errors[:3]
    return rows


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
