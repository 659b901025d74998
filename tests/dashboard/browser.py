"""Debian's Chromium driven by Playwright, headless, with a fresh profile (Playwright's own browser download
does not work on these machines), and a page that records every console error and uncaught exception."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_available() -> bool:
    if not Path(CHROMIUM).exists():
        return False
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Browser:
    context: Any
    errors: list[str] = field(default_factory=list)

    def new_page(self, width: int = 1440, height: int = 1000) -> Any:
        page = self.context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        page.on(
            "console",
            lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        return page


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="fleetguard-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            try:
                yield Browser(context)
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


# Every table served in pages (dashboard.components.served_table) shows rows of the round its page's slot
# names (the field dashboard.served_rows.ROUND_FIELD of each row it was sent), drawn in the page, and the
# line that counts them: its header is drawn before its first page of rows has come back, and after a
# refresh that names a new round it shows the old round's rows until the new ones have.
SERVED_TABLES_DRAWN_JS = """() => {
  const SKIP = new Set(['figure', 'data', 'rowData', 'columnDefs', 'columns']);  // data, not components
  const rounds = {};
  const props = {};
  const walk = (node) => {
    if (Array.isArray(node)) { node.forEach(walk); return; }
    if (!node || typeof node !== 'object') return;
    if (typeof node.namespace === 'string' && node.props) {
      const id = node.props.id;
      if (id && id.slot === 'blocks') rounds[id.name] = node.props.data;
      if (typeof id === 'string') props[id] = node.props;
      for (const [k, v] of Object.entries(node.props)) if (!SKIP.has(k)) walk(v);
      return;
    }
    Object.values(node).forEach(walk);
  };
  walk(window.store && window.store.getState().layout);
  for (const [name, round] of Object.entries(rounds)) {
    const table = props[name + '-rows'];
    const count = props[name + '-count'];
    if (!table || !count || !count.children) return false;
    const rows = table.data || [];
    if (rows.length === 0) continue;
    if (rows[0]._round !== round) return false;
    if (!document.querySelector('#' + name + ' td.dash-cell')) return false;
  }
  return true;
}"""

# A page is drawn when its body is filled, no callback is pending, every graph has its SVG (a graph whose
# plotly bundle is still loading has no .js-plotly-plot yet, so graphs are found by dcc.Graph's own class),
# every table its header (an AG Grid's or a DataTable's: each one's chunk loads on first use, after the
# layout) and every table served in pages its rows.
DRAWN_JS = (
    """() => {
  const body = document.querySelector('[id$="-body"]');
  if (!body || body.children.length === 0) return false;
  if (document.querySelector('[data-dash-is-loading="true"]')) return false;
  for (const p of document.querySelectorAll('.dash-graph')) {
    if (!p.querySelector('.main-svg')) return false;
  }
  for (const t of document.querySelectorAll('.table')) {
    if (!t.querySelector('.ag-header-cell, th.dash-header, .empty-table th')) return false;
  }
  return ("""
    + SERVED_TABLES_DRAWN_JS
    + """)();
}"""
)


def wait_drawn(page: Any, timeout_ms: int = 60_000) -> None:
    page.wait_for_function(DRAWN_JS, timeout=timeout_ms)


# The value Dash will send as a callback's State: the component's props in the renderer's store, which an
# input event updates through React, not necessarily before Playwright's next action.
DASH_VALUE_JS = """([id, value]) => {
  const state = window.store && window.store.getState();
  const path = state && state.paths && state.paths.strs[id];
  if (!path) return false;
  let node = state.layout;
  for (const key of path) { node = node && node[key]; }
  if (!node || !node.props) return false;
  const held = node.props.value;
  return value === "" ? held === undefined || held === null || held === "" : held === value;
}"""


def fill_dash_input(page: Any, component_id: str, value: str, timeout_ms: int = 60_000) -> None:
    """Type `value` into a dcc.Input and wait until Dash holds it, so a click right after sends it."""
    page.fill(f"#{component_id}", value)
    page.wait_for_function(DASH_VALUE_JS, arg=[component_id, value], timeout=timeout_ms)
