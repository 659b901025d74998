"""What drawing a page's figures costs, by part, inside Chromium (issue 22 item 4).

The GPU page's one figure (nine rows on a shared time axis) is most of that page's first render. This loads
a page (--page, the GPU page by default) once from a dashboard served over the bench store, takes the
figures Dash was given, and draws them again with `Plotly.newPlot` into fresh elements of the page's width
(the times summed), as they are and with one thing changed at a time (no event lines, no template, half
the points, ...), the variants interleaved round-robin so that each sees the same moments of the machine's
load. Prints the median and the p95 per variant, in ms. The draws are warm (plotly's code has run before in
the tab): they rank the parts; a first render's draw, cold, costs several times more.

Usage: python bench/dashboard_figure_cost.py --store /tmp/fg-dbench-s4/dbench.duckdb [--runs 9]
                                             [--page gpu|fleet|network|job] [--window 1h|24h] [--src DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dashboard_render import DRAWN, TIMEOUT_MS, pages, pct, serve_child, stop_child
from fleetguard.store import Store
from tests.dashboard.browser import chromium

# Each variant changes one thing of a copy of the figure (data, layout); the names are the rows printed.
VARIANTS = """
({
  'as served': (d, l) => [d, l],
  'no event lines': (d, l) => [d, {...l, shapes: (l.shapes || []).filter(s => s.xref !== 'x')}],
  'no template': (d, l) => { const {template, ...rest} = l; return [d, rest]; },
  'template, its data only for scatter/bar/heatmap': (d, l) => {
    const keep = ['scatter', 'bar', 'heatmap'];
    const data = Object.fromEntries(Object.entries(l.template.data).filter(([k]) => keep.includes(k)));
    return [d, {...l, template: {...l.template, data}}];
  },
  'template, its cartesian layout only': (d, l) => {
    const drop = ['polar', 'ternary', 'scene', 'geo', 'coloraxis', 'colorscale'];
    const keep = ['scatter', 'bar', 'heatmap'];
    const data = Object.fromEntries(Object.entries(l.template.data).filter(([k]) => keep.includes(k)));
    const layout = Object.fromEntries(Object.entries(l.template.layout).filter(([k]) => !drop.includes(k)));
    return [d, {...l, template: {data, layout}}];
  },
  'no automargin': (d, l) => {
    const out = {...l, margin: {...l.margin, l: 110}};
    for (const k of Object.keys(l)) if (k.startsWith('yaxis')) out[k] = {...l[k], automargin: false};
    return [d, out];
  },
  'x axes without automargin': (d, l) => {
    const out = {...l};
    for (const k of Object.keys(l)) if (k.startsWith('xaxis')) out[k] = {...l[k], automargin: false};
    return [d, out];
  },
  'x automargin only where labels show': (d, l) => {
    const out = {...l};
    for (const k of Object.keys(l)) if (k.startsWith('xaxis')) {
      out[k] = {...l[k], automargin: l[k].showticklabels !== false};
    }
    return [d, out];
  },
  'bottom margin 45 px, automargin kept': (d, l) => [d, {...l, margin: {...l.margin, b: 45}}],
  'margins b 45, l 140, automargin kept': (d, l) => [d, {...l, margin: {...l.margin, b: 45, l: 140}}],
  'no automargin on any axis': (d, l) => {
    const out = {...l, margin: {...l.margin, l: 110}};
    for (const k of Object.keys(l)) if (k.startsWith('xaxis') || k.startsWith('yaxis')) {
      out[k] = {...l[k], automargin: false};
    }
    return [d, out];
  },
  'no matches': (d, l) => {
    const out = {...l};
    for (const k of Object.keys(l)) if (k.startsWith('xaxis')) { const {matches, ...a} = l[k]; out[k] = a; }
    return [d, out];
  },
  'no annotations': (d, l) => [d, {...l, annotations: []}],
  'half the points': (d, l) => [d.map(t => (t.mode === 'lines' && t.x && t.x.length > 2)
      ? {...t, x: t.x.filter((_, i) => i % 2 === 0), y: t.y.filter((_, i) => i % 2 === 0)} : t), l],
  'hovermode false': (d, l) => [d, {...l, hovermode: false}],
  'spikes off, hover x': (d, l) => [d, {...l, hovermode: 'x'}],
  'no throttle strip': (d, l) => {
    const cat = Object.entries(l).filter(([k, v]) => k.startsWith('yaxis') && v.type === 'category')
      .map(([k]) => 'y' + k.slice(5));
    return [d.filter(t => !cat.includes(t.yaxis)), l];
  },
})
"""

MEASURE = (
    """
async ([figs, runs, width]) => {
  const variants = """
    + VARIANTS
    + """;
  const times = Object.fromEntries(Object.keys(variants).map(k => [k, []]));
  const host = document.createElement('div');
  document.body.appendChild(host);
  for (let r = 0; r < runs; r++) {
    for (const [name, make] of Object.entries(variants)) {
      let took = 0;
      for (const fig of figs) {
        const copy = JSON.parse(JSON.stringify(fig));
        const [data, layout] = make(copy.data || [], copy.layout || {});
        const div = document.createElement('div');
        div.style.width = width + 'px';
        host.appendChild(div);
        await new Promise(requestAnimationFrame);
        const t0 = performance.now();
        await window.Plotly.newPlot(div, data, layout, {displaylogo: false, responsive: true});
        took += performance.now() - t0;
        window.Plotly.purge(div);
        div.remove();
      }
      times[name].push(took);
    }
  }
  return times;
}
"""
)

# The figure Dash was given (the Graph's figure prop in Dash's layout store) and the drawn plot's width.
FIGURE = """() => {
  const found = [];
  const walk = (node) => {
    if (!node || typeof node !== 'object') return;
    if (Array.isArray(node)) { node.forEach(walk); return; }
    if (node.type === 'Graph' && node.props && node.props.figure) { found.push(node.props.figure); return; }
    Object.values(node).forEach(walk);
  };
  walk(window.store.getState().layout);
  const plot = document.querySelector('.js-plotly-plot');
  return [found, plot ? plot.getBoundingClientRect().width : 1200];
}"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", default="/tmp/fg-dbench-s4/dbench.duckdb")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--page", default="gpu", choices=["gpu", "fleet", "network", "job"])
    parser.add_argument("--window", default="1h", choices=["1h", "24h"], help="the GPU page's")
    parser.add_argument("--src", default="", help="another tree's root, served instead of this one's")
    args = parser.parse_args()
    store_path = Path(args.store)
    with Store.open(store_path, read_only=True) as store:
        page_path = next(p for pid, p in pages(store) if pid == args.page)
    path = page_path + ("?window=24h" if args.page == "gpu" and args.window == "24h" else "")
    src = Path(args.src).resolve() if args.src else Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="fg-dbench-clock-") as tmp:
        clock = Path(tmp) / "clock"
        clock.write_text("0")
        child, url = serve_child(src, store_path, clock)
        try:
            with chromium() as browser:
                page = browser.new_page()
                page.goto(url.rstrip("/") + path)
                page.wait_for_function(DRAWN, arg=args.page, timeout=TIMEOUT_MS)
                figures, width = page.evaluate(FIGURE)
                data = [t for f in figures for t in f.get("data", [])]
                points = sum(len(t.get("x") or []) for t in data)
                shown = f"{path}: {len(figures)} figures, {len(data)} traces, {points} points, {width:.0f} px"
                print(shown, flush=True)
                times = page.evaluate(MEASURE, [figures, args.runs, width])
                page.close()
        finally:
            stop_child(child)
    print(f"\n| variant ({path}) | draw p50 ms | p95 ms |")
    print("|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.0f} | {pct(values, 0.95):.0f} |")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
